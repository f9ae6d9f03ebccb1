"""Warming numba's on-disk cache, so that a fresh process (a new container, a new worker) loads
the compiled loops instead of compiling them on its first big plan or first run (seconds of it:
docs/BENCHMARKS.md, "Figures behind the code").

`warm` does once what those first requests do:

1. plan a generated network (`planner.generate.network_like`) and a generated training step
   (`training_like`) of `blocks` buffers, at least `FROM_BLOCKS`, where the placement engine's
   compiled loop takes over, with every fast strategy (or the ones given);
2. run models through `runtime.Session` as a run job does (default memory options, seeded
   random inputs): the gallery's examples, and one step of each training demo network;
3. run the tiny graphs of `app.services.warm_graphs` the same way (always: they take
   milliseconds once compiled), which reach the kernel loops no model of step 2 does (the
   normalisations, depthwise convs, squeeze-and-excitation, both Winograd variants, Gemm, and
   the examples of the Conv, pool and recurrence route tables), and a small MobileNetV2-like
   network tiled by ``--tile auto``, whose float stage runs in the tiled stage's compiled calls.

numba writes the cache where `planner.jit` says (``NUMBA_CACHE_DIR`` when set, which must be
set before the process starts). The report counts, from numba's own stats, the loops this
process compiled and those it loaded from the cache (a second process finds them all there),
and names the entry loops (`planner.jit.entries`) it reached by neither: `missed`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import planner
import runtime
from app.services.warm_graphs import GRAPHS
from planner import jit
from planner.generate import network_like, training_like
from planner.timeline_jit import FROM_BLOCKS
from runtime import oracle
from runtime.kernels import kernels
from runtime.tiling import tile_auto
from runtime.training.demo import DEMO_MODELS, train_demo
from runtime.training.models import mobilenet_v2_like

DEFAULT_BLOCKS = 6_000  # a little past FROM_BLOCKS: the generators' problems are then placed by the compiled loop
GENERATORS = {"network_like": network_like, "training_like": training_like}


class WarmError(ValueError):
    """A value `warm` cannot take: the `parameter` it was given for, the `value`, and the `reason`
    (which says what is accepted)."""

    def __init__(self, parameter: str, value: object, reason: str) -> None:
        super().__init__(f"{parameter}={value!r}: {reason}")
        self.parameter, self.value, self.reason = parameter, value, reason


def model_names() -> list[str]:
    """What `warm` can run: the training demo's networks, then the gallery's examples."""
    from app.services.library import examples  # the storage it imports is not needed to start the CLI

    return [*DEMO_MODELS, *(str(e["name"]) for e in examples())]


def fast_strategies() -> list[str]:
    return [name for name in planner.names() if not planner.get(name).slow]


def warm(
    *,
    blocks: int = DEFAULT_BLOCKS,
    strategies: list[str] | None = None,
    models: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Plan and run as the module's docstring says (default: every fast strategy, every model of
    `model_names`); the report of what was done and what numba compiled and loaded."""
    strategies = fast_strategies() if strategies is None else strategies
    models = model_names() if models is None else models
    _check(blocks, strategies, models)
    steps: list[dict[str, Any]] = []

    def timed(what: str, work: Callable[[], object]) -> None:
        if progress is not None:
            progress(what)
        started = time.perf_counter()
        work()
        steps.append({"what": what, "seconds": round(time.perf_counter() - started, 3)})

    if jit.ENABLED:
        for name, generate in GENERATORS.items():
            problem = generate(blocks)
            for strategy in strategies:
                timed(f"plan {name}({blocks:,}) with {strategy}", partial(planner.plan, problem, strategy))
        for model in models:
            timed(f"run {model}", partial(_run, model))
        for name, build in GRAPHS.items():
            timed(f"run {name} (tiny graph)", partial(_run_built, build))
        timed("run tiled_stage (tiny graph, --tile auto)", _run_tiled)
    return {"compiled_loops": jit.ENABLED, **loop_stats(), "steps": steps}


def loop_stats() -> dict[str, Any]:
    """The compiled loops this process used: how many, how many signatures numba compiled (not in
    the cache) and loaded (from it), the cache folders, and the entry loops of every kernel and
    of the planner that it neither compiled nor loaded (`missed`, as module.name)."""
    kernels()  # every kernel module imported, so that `jit.LOOPS` holds all their loops
    used = [loop for loop in jit.LOOPS if loop.signatures]
    stats = [loop.stats for loop in used]
    return {
        "loops": len(used),
        "compiled": sum(sum(s.cache_misses.values()) for s in stats),
        "loaded": sum(sum(s.cache_hits.values()) for s in stats),
        "cache": sorted({str(s.cache_path) for s in stats if s.cache_path}),
        "missed": [f"{loop.py_func.__module__}.{loop.__qualname__}" for loop in jit.entries() if not loop.signatures],
    }


def _check(blocks: int, strategies: list[str], models: list[str]) -> None:
    if blocks < FROM_BLOCKS:
        raise WarmError("blocks", blocks, f"at least {FROM_BLOCKS:,}, where the compiled placing loop takes over")
    known = planner.names()
    for strategy in strategies:
        if strategy not in known:
            raise WarmError("strategies", strategy, f"no such strategy; accepted: {', '.join(known)}")
    accepted = model_names()
    for model in models:
        if model not in accepted:
            raise WarmError("models", model, f"no such model; accepted: {', '.join(accepted)}")


def _run(model: str) -> None:
    """One training step of a demo network, or a gallery example run once as a run job runs it."""
    if model in DEMO_MODELS:
        train_demo(model, steps=1)
        return
    from app.services.library import EXAMPLES_DIR, examples

    files = {e["name"]: str(e["file"]) for e in examples()}
    _run_graph(runtime.load_model(EXAMPLES_DIR / files[model]))


def _run_built(build: Callable[[], Any]) -> None:
    _run_graph(runtime.load_model(build()))


def _run_tiled() -> None:
    """A small MobileNetV2-like network as a run job with ``--tile auto`` runs it: its head tiled,
    the float stage in the compiled calls of `runtime.tiling.band_program`."""
    graph = runtime.load_model(mobilenet_v2_like(size=40, width=0.35, classes=10))
    _run_graph(tile_auto(graph, runtime.MemoryOptions()).graph)


def _run_graph(graph: runtime.Graph) -> None:
    session = runtime.Session(graph, planner.DEFAULT_STRATEGY, runtime.MemoryOptions()).prepare()
    session.run(oracle.random_inputs(graph, 0))
