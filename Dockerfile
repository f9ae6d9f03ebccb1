# memplan's web service: `docker build -t memplan . && docker run -p 8000:8000 -v memplan-data:/data memplan`
# (SQLite in /data by default; -e MEMPLAN_DATABASE_URL=postgresql+psycopg://user:password@host:5432/db for a team)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    MEMPLAN_DATA=/data

WORKDIR /srv/memplan

# Dependencies first, so that code changes do not reinstall them: exactly the lock, checked by hash
# (scripts/lock.sh; it also holds the test tools, which the image carries too: one lock, one truth).
COPY requirements/lock.txt requirements/lock.txt
RUN pip install --require-hashes -r requirements/lock.txt

COPY pyproject.toml README.md* ./
COPY app ./app
COPY planner ./planner
COPY runtime ./runtime
COPY static ./static
COPY templates ./templates
# Editable, so that the app finds static/ and templates/ next to its package.
RUN pip install --no-deps -e . \
    && useradd --create-home --uid 10001 memplan \
    && mkdir -p /data && chown memplan /data

# numba compiles the planner's placing loop (5,000 blocks and up) and the kernels' loops on first use,
# ~10 s in every new process. `memplan warm` plans generated problems with every fast strategy, runs the
# gallery's models and one step of each training demo network, then tiny graphs that reach every other
# kernel with compiled loops (GRU, LSTM, RNN, LayerNormalization, RMSNormalization, Softmax, Gemm,
# depthwise, dense and Winograd F(2x2)/F(4x4) convs, squeeze-and-excitation, MaxPool, GlobalAveragePool),
# here, as the user the service runs as, so that numba's cache sits in a folder that user owns and every
# container and worker of this image loads the loops instead (for the dtypes and layouts those runs use:
# float64 or another layout compiles once more). The cached code is for the build machine's CPU: on
# another CPU numba compiles once more and adds to the same folder.
ENV NUMBA_CACHE_DIR=/home/memplan/.cache/numba
USER memplan
RUN memplan warm

VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/v1/examples', timeout=4)"
CMD ["memplan", "serve", "--host", "0.0.0.0", "--port", "8000"]
