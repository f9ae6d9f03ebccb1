"""`Session.run(inputs)` on the program route (`runtime.program`) in one short Python frame.

On the smallest models a run by the program is a few tenths of a microsecond of compute, and the
general `Session.run` spent ten times that on bookkeeping it redoes on every call: which inputs the
model takes, their shapes and dtypes, where each goes, how outputs come back, a `RunStats` built
field by field. A session whose runs go by its program binds `fast_run` at prepare, where all of
that is worked out once; a call then only

1. checks its feeds by identity: a dict holding exactly the graph's inputs, each an `ndarray` of
   the bound rank whose dtype is the model's own (the same object: numpy keeps one per type);
2. makes one compiled call (`runtime.kernels.quantized.jit_fed`) that checks the input's shape,
   copies it into its arena view and runs and times the program (a model with several inputs or
   outputs, or an input type numba lacks, copies with numpy and times the program's own call),
   then copies each output into a fresh array the caller owns (the general run's contract: the
   next run does not change it);
3. records its seconds (and True beside them when tracemalloc is on): `LastRunStats` makes the
   `RunStats` the general run would make, from a template kept at prepare, when `Session.stats`
   is first read (building its thirteen fields took a quarter of the call).

Everything else goes to the general run, unchanged: a feed to cast, a missing, unknown or
misshapen input (refused there with the same errors), any mapping but a dict, ``on_step`` or
``measure`` given or set on the session, per-step hooks (a `Session.capture`), caller memory
(`input_buffer`, `output_buffer`, `bind_input`, `bind_output`). The fast call refuses nothing
itself, so it accepts and refuses exactly what the general run does, with the same outputs,
states and stats (the tests compare them, and both with TensorFlow Lite Micro's interpreter).
It holds its session weakly: the session keeps it as its ``run`` attribute, not in a cycle.
Where its microseconds go, against TensorFlow Lite Micro's whole call: docs/BENCHMARKS.md.
"""

from __future__ import annotations

import time
import tracemalloc
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from runtime.arena import address
from runtime.caller_memory import CallerMemory
from runtime.kernels.quantized.jit_fed import WRONG_SHAPE, fed_entry, fed_frame
from runtime.program import Program
from runtime.stats import RunStats

Run = Callable[..., dict[str, np.ndarray]]
_SLOT = "_last_run_stats"  # where `LastRunStats` keeps a session's value (the fast calls store by this name)
_TEMPLATE = "_fast_run_stats"  # the fields of the fast call's RunStats but its seconds and tracing


class LastRunStats:
    """`Session.stats`, the last run's `RunStats` (None before any): what a run stores, or made on the
    first read from what the fast call stored (its seconds, or its seconds and True when tracemalloc
    was on) and the session's template, then kept, so every read until the next run returns the
    same object."""

    def __get__(self, session: Any, owner: type | None = None) -> RunStats | None:
        if session is None:
            return self  # type: ignore[return-value]  # the descriptor itself, read on the class
        value: Any = session.__dict__.get(_SLOT)
        if value.__class__ is float:
            value = (value, False)
        if value.__class__ is tuple:
            seconds, traced = value
            made = object.__new__(RunStats)
            made.__dict__ = {**session.__dict__[_TEMPLATE], "seconds": seconds, "traced": traced, "fallbacks": {}}
            value = session.__dict__[_SLOT] = made
        return value

    def __set__(self, session: Any, value: RunStats | None) -> None:
        session.__dict__[_SLOT] = value


def fast_run(session: Any, general: Run, program: Program, views: Mapping[str, np.ndarray], io: CallerMemory) -> Run:
    """`session.run` for a prepared `session` whose runs go by `program`; `general` is the unbound
    `Session.run`, taking every call the fast one does not (see the module)."""
    graph, arena, alive = session.graph, session.arena, weakref.ref(session)
    if any(name not in views for name in (*graph.inputs, *graph.outputs)):  # a model's I/O outside the arena

        def passed_on(inputs: Any = None, on_step: Any = None, *, measure: Any = None) -> dict[str, np.ndarray]:
            return general(alive(), inputs, on_step, measure=measure)

        return passed_on
    ins = tuple((name, views[name], views[name].shape, views[name].dtype) for name in graph.inputs)
    outs = tuple((name, views[name]) for name in graph.outputs)
    stats = RunStats(
        session.plan.arena_bytes, None, 0.0, copies=len(ins) + len(outs),
        copied_bytes=sum(v.nbytes for _, v, _, _ in ins) + sum(v.nbytes for _, v in outs),
        constant_bytes=session.constant_bytes, measure="time", route="program",
    )  # fmt: skip
    session.__dict__[_TEMPLATE] = vars(stats)
    fed = fed_entry(ins[0][1]) if len(ins) == len(outs) == 1 else None
    if fed is None:
        return _many(alive, general, program, arena, ins, outs, io)
    return _one_to_one(alive, general, program, fed, arena, ins[0], outs[0], io)


def _one_to_one(alive: Any, general: Run, program: Program, fed: Any, arena: np.ndarray, feed: tuple,
                out: tuple[str, np.ndarray], io: CallerMemory) -> Run:  # fmt: skip
    """The fast call of a model with one input and one output (most small models): `fed` checks the
    input's shape, copies it into its arena view and runs and times the program (`jit_fed`)."""
    (name, view, shape, dtype), (result, out_view) = feed, out
    frame = fed_frame(arena, program.blob, program.code, address(view) - address(arena), shape)
    at, failure, ndim = address(frame), program.failure, len(shape)
    own, bindings = io.own, io.bindings
    ndarray, tracing = np.ndarray, tracemalloc.is_tracing

    def run(inputs: Any = None, on_step: Any = None, *, measure: Any = None) -> dict[str, np.ndarray]:
        s = alive()
        if (
            on_step is not None or measure is not None or inputs.__class__ is not dict or len(inputs) != 1
            or s.on_step is not None or s.measure != "time" or s._after or own or bindings
        ):  # fmt: skip
            return general(s, inputs, on_step, measure=measure)
        try:
            x = inputs[name]
        except KeyError:
            return general(s, inputs, on_step, measure=measure)
        if x.__class__ is not ndarray or x.ndim != ndim or x.dtype is not dtype:
            return general(s, inputs, on_step, measure=measure)
        nanoseconds = fed(at, x)  # checks the shape, copies the input in, runs the program, times it
        if nanoseconds < 0:
            if nanoseconds == WRONG_SHAPE:  # nothing written: refused by the general run
                return general(s, inputs, on_step, measure=measure)
            raise failure(-1 - nanoseconds)
        s._last_run_stats = (nanoseconds * 1e-9, True) if tracing() else nanoseconds * 1e-9
        return {result: out_view.copy()}

    run.__doc__ = general.__doc__
    # What `fed` reads by address: the frame held here, the arena by the session, the blob and code by
    # the program (through `failure`).
    run.__dict__["fed_frame"] = frame
    return run


def _many(alive: Any, general: Run, program: Program, arena: np.ndarray, ins: tuple, outs: tuple,
          io: CallerMemory) -> Run:  # fmt: skip
    """The fast call of any other model: its inputs copied in by numpy, then the program's call."""
    call, blob, code, failure = program.call, program.blob, program.code, program.failure
    own, bindings, count = io.own, io.bindings, len(ins)
    ndarray, clock, tracing = np.ndarray, time.perf_counter, tracemalloc.is_tracing

    def run(inputs: Any = None, on_step: Any = None, *, measure: Any = None) -> dict[str, np.ndarray]:
        s = alive()
        if (
            on_step is not None or measure is not None or inputs.__class__ is not dict or len(inputs) != count
            or s.on_step is not None or s.measure != "time" or s._after or own or bindings
        ):  # fmt: skip
            return general(s, inputs, on_step, measure=measure)
        for name, _, shape, dtype in ins:
            x = inputs.get(name)
            if x.__class__ is not ndarray or x.shape != shape or x.dtype is not dtype:
                return general(s, inputs, on_step, measure=measure)
        for name, view, _, _ in ins:
            view[...] = inputs[name]
        started = clock()
        failed = call(arena, blob, code)
        seconds = clock() - started
        if failed:
            raise failure(failed)
        results = {name: out.copy() for name, out in outs}
        s._last_run_stats = (seconds, True) if tracing() else seconds
        return results

    run.__doc__ = general.__doc__
    return run
