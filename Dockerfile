# memplan's web service: `docker build -t memplan . && docker run -p 8000:8000 -v memplan-data:/data memplan`
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    MEMPLAN_DATA=/data

WORKDIR /srv/memplan

# Dependencies first, so that code changes do not reinstall them.
COPY pyproject.toml README.md* ./
RUN mkdir -p app planner runtime \
    && touch app/__init__.py planner/__init__.py runtime/__init__.py \
    && pip install ".[ort]" \
    && pip uninstall -y memplan

COPY app ./app
COPY planner ./planner
COPY runtime ./runtime
COPY static ./static
COPY templates ./templates
# Editable, so that the app finds static/ and templates/ next to its package.
RUN pip install --no-deps -e . \
    && useradd --create-home --uid 10001 memplan \
    && mkdir -p /data && chown memplan /data

USER memplan
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/v1/examples', timeout=4)"
CMD ["memplan", "serve", "--host", "0.0.0.0", "--port", "8000"]
