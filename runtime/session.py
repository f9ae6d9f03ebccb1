"""Running a loaded model inside one planned arena.

``Session(graph, plan, options).prepare()`` resolves every kernel (all unsupported ops are listed
in one error before anything runs), builds the memory problem of `options` (a
`runtime.MemoryOptions`), plans it when given a strategy name, refuses a plan `planner.check_plan`
rejects, allocates one aligned uint8 arena and makes every non-constant tensor a view
``arena[off:off+nbytes].view(dtype).reshape(shape)`` (`runtime.arena`). Each node becomes a step
(`runtime.steps`) whose kernel call is bound at prepare (`runtime.step_calls`: output views,
workspace, attributes, opset), so that a run only reads input slots.

``run(inputs)`` is then a flat loop over the steps. Without a canary, `after_node` hooks or an
`on_step` callback the loop is the bound calls and one clock read per step (a float tiled stage:
one call, `runtime.tiling.band_program`), and `RunStats.trace` is made from the step times only
when read. When every step is a compiled integer loop on tensors at fixed places (small TFLite
integer models, `runtime.program`), prepare also builds one compiled program, and a run without a
canary, hooks or an `on_step` callback is one call of it, with no per-step times (`route`,
`RunStats.route`; `route_note` says why not), made by `runtime.fast_run`'s short ``run``;
`invoker()` is that call alone, as TensorFlow Lite Micro's ``invoke()``.

Zero-copy I/O (`runtime.caller_memory`): `input_buffer`/`output_buffer` hand out the session's own
buffers (arena views under ``io="arena"``) so a caller writes inputs and reads outputs in place;
`bind_input`/`bind_output` make kernels read and write caller memory when it fits (see
`runtime.binding`) and copy, saying why, when it does not. `RunStats` counts every copy. These
methods come from `CallerMemoryMethods`, which the session provides with its `CallerMemory`.

Parameters: with ``params=`` a `runtime.params.ParameterStore` the constants are shared, read-only
views (one allocation for every session holding the same bytes). Initializers named in
``unbound=`` commit no memory at prepare and are bound by `set_shared_input`
(`runtime.shared_inputs`). An ``arena=`` given by the caller (see `runtime.batches`) is used
instead of a new one. States (`runtime.states`) are the session's own, beside the arena, carried
from run to run.

Variations are hooks, not copies: ``problem=`` plans a prebuilt problem of the graph instead of
`memory_problem` (a training step's, see `runtime.training.session`), and ``after_node=`` runs a
callable right after the named node, before the next step (a training step's loss check, which
raises to stop the run before any update).

Time and memory are measured in separate runs, because tracemalloc slows numpy down (by how much:
docs/BENCHMARKS.md, "Figures behind the code"):

- ``run(inputs, measure="time")`` (the default) times the loop and each step with tracing off;
- ``run(inputs, measure="memory")`` traces it with tracemalloc (which sees numpy's data
  allocations) and reports the peak of bytes allocated outside the arena as
  `RunStats.outside_arena_bytes`. The arena itself and the returned outputs are allocated outside
  that window, so what is reported is what kernels and the dispatcher allocated on the side. A
  memory run's times are kept but marked (`RunStats.measure`, `RunStats.traced`): report times
  from time runs only.

`measure_runs` does both the way `memplan run` reports them.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import numpy as np

import planner
from planner import Plan, Problem
from runtime.arena import arena_views, read_only, take_arena
from runtime.caller_memory import CallerMemory, CallerMemoryMethods
from runtime.canary import Canary
from runtime.errors import ExecutionError, FeedError, TensorTooLargeError
from runtime.fast_run import LastRunStats, fast_run
from runtime.graph import Graph
from runtime.kernels import Kernel, loop_ufunc_buffers, shared_scratch_held
from runtime.options import DEFAULT_ALIGNMENT, MemoryOptions
from runtime.params import ParameterStore
from runtime.prepare_checks import check_plan, resolve_kernels
from runtime.problem import check_aliases, memory_problem
from runtime.program import Program, build_program
from runtime.shared_inputs import SharedInputs
from runtime.states import States
from runtime.stats import RunStats
from runtime.step_calls import bind_call
from runtime.steps import (
    AfterNode,
    Step,
    after_hooks,
    canary_writes,
    copying_hooks,
    make_step,
    prepare_kernels,
)
from runtime.tiling.band_program import stage_calls

OnStep = Callable[[int, int, str, float], None]  # (index, total, node name, seconds)
# What a run measures: honest times (no tracing), or bytes beside the arena.
Measure = Literal["time", "memory"]
MEASURES = ("time", "memory")
DEFAULT_MAX_ARENA_BYTES = 16 << 30


class Session(CallerMemoryMethods):
    """Run `graph` inside the arena of `plan` (a Plan, or the name of a strategy to plan with)."""

    # The last run's RunStats, None before any (made when read after a fast call).
    stats = LastRunStats()

    def __init__(
        self,
        graph: Graph,
        plan: Plan | str = planner.DEFAULT_STRATEGY,
        options: MemoryOptions | None = None,
        *,
        canary: bool = False,
        check: bool = True,
        measure: Measure = "time",
        max_arena_bytes: int = DEFAULT_MAX_ARENA_BYTES,
        on_step: OnStep | None = None,
        params: ParameterStore | None = None,
        unbound: Iterable[str] = (),
        arena: np.ndarray | None = None,
        io_alignment: int = 0,
        problem: Problem | None = None,
        after_node: Mapping[str, AfterNode] | None = None,
        program: bool = True,
    ) -> None:
        self.graph = graph
        self.options = options or MemoryOptions()
        # A prebuilt problem (a training step's) is planned as given instead of `memory_problem`.
        self._problem_arg = problem
        self._after_node = dict(after_node or {})
        self._program_wanted = program  # False: every run takes the step loop (its kernels one by one)
        self.canary = canary
        self.check = check  # False only to prove the canary: runs a plan the checker would refuse
        self.measure = _checked_measure(measure)  # what `run` measures when it is not told
        self.max_arena_bytes = max_arena_bytes
        self.on_step = on_step
        self._plan_arg = plan
        self.params = params
        self.io_alignment = io_alignment  # 0: a bound array needs only its element's alignment
        self._arena_arg = arena
        self._shared = SharedInputs(unbound)
        self._io: CallerMemory | None = None  # made at prepare, with the arena views
        self.problem: Problem | None = None
        self.plan: Plan | None = None
        self.arena: np.ndarray | None = None
        self.stats = None
        self._prepared = False

    # ---- prepare -----------------------------------------------------------------------------------

    def prepare(self) -> Session:
        """Resolve kernels, plan, check the plan, allocate the arena and bind every view.
        Idempotent."""
        if self._prepared:
            return self
        kernels = resolve_kernels(self.graph)
        self._shared.check(self.graph)
        if self.params is not None:
            self.graph = self.params.share(self.graph, skip=self._shared.names)
        problem, plan = self._planned()
        self.problem, self.plan = problem, plan
        alignment = max(self.options.alignment, DEFAULT_ALIGNMENT)
        self.arena = take_arena(self._arena_arg, plan.arena_bytes, alignment)
        self._bind_views(problem, plan)  # and the constants
        self._io = CallerMemory(self.graph, self._views, self._values, self._slot, self.io_alignment)
        self._steps = self._make_steps(kernels)
        self._calls = [bind_call(s, self._none_slot, self.graph, self._values) for s in self._steps]
        self._labels = tuple((s.node.name, s.node.op_type) for s in self._steps)
        self._after = after_hooks(self._steps, self._after_node, self.graph)
        fast_loop = stage_calls(self.graph, self._steps, self._calls, self._values, self.arena)
        self._fast, self.stage_note = fast_loop
        self._canary = None
        if self.canary:
            self._canary = Canary(problem, plan, self.arena, canary_writes(problem, self._steps))
        self._program, self.route_note = self._build_program()
        if self._program is not None:
            # A run with no per-step work: one short frame (`runtime.fast_run`).
            fast = fast_run(self, Session.run, self._program, self._views, self._io)
            self.run = fast  # type: ignore[method-assign]
        self._prepared = True
        return self

    def _planned(self) -> tuple[Problem, Plan]:
        """The memory problem (the prebuilt one, or the graph's under `options`) and its plan,
        checked."""
        problem = self._problem_arg
        if problem is None:
            problem = memory_problem(self.graph, self.options)
            # A prebuilt problem's aliases are its builder's contract: a training step's updates
            # overwrite the parameters (graph outputs) on purpose.
            check_aliases(self.graph, problem)
        plan = self._plan_arg
        if isinstance(plan, str):
            plan = planner.plan(problem, plan)
        check_plan(problem, plan, self.check)
        if plan.arena_bytes > self.max_arena_bytes:
            raise TensorTooLargeError(
                f"the arena of plan {plan.strategy!r} is {plan.arena_bytes:,} bytes, more than "
                f"max_arena_bytes={self.max_arena_bytes:,}; refused before allocating"
            )
        return problem, plan

    def _bind_views(self, problem: Problem, plan: Plan) -> None:
        """A writable and a read-only view per arena tensor, slots for everything a step reads."""
        assert self.arena is not None
        self._views, self._ws = arena_views(self.graph, problem, plan, self.arena)
        self._slot: dict[str, int] = {}
        self._values: list[np.ndarray | None] = []
        for name in self.graph.tensors:
            self._slot[name] = len(self._values)
            self._values.append(None)
        self._none_slot = len(self._values)  # what an omitted input reads: always None
        self._values.append(None)
        for name, view in self._views.items():
            self._values[self._slot[name]] = read_only(view)
        self._bind_constants()

    def _bind_constants(self) -> None:
        """Each constant written into its arena view when it is planned there, else held in its
        slot (a state as the session's own copy); an unbound one only once it is bound."""
        self.constant_bytes = 0
        self.states = States()
        for name, c in self.graph.constants.items():
            if name in self._shared.names:  # committed only when set_shared_input binds it
                self._values[self._slot[name]] = self._shared.bound.get(name)
                continue
            value = c.value() if name in self._views else self.states.value(name, c)
            self.constant_bytes += value.nbytes
            if name in self._views:  # constants planned into the arena
                self._views[name][...] = value
            else:
                self._values[self._slot[name]] = value

    def _make_steps(self, kernels: dict[str, Kernel]) -> list[Step]:
        """One step per node, after each kernel's prepare and constants hooks (`runtime.steps`)."""
        fixed = self.graph.constants.keys() - set(self._shared.names) - self._views.keys()
        prepared = self.options.prepared_weights
        constants, nbytes = prepare_kernels(self.graph, kernels, self._values, self._slot, fixed, prepared)
        self.constant_bytes += nbytes
        views, ws, slot = self._views, self._ws, self._slot
        return [
            make_step(node, kernels[node.name], self.graph, views, ws, slot, constants.get(node.name, {}))
            for node in self.graph.nodes
        ]

    def _build_program(self) -> tuple[Program | None, str]:
        """The compiled program of the whole model, or None and why not (`runtime.program`)."""
        # A run's work between steps: the canary's checks, hooks, shared inputs' slots.
        per_step = self._canary is not None or self._after or self._shared.names
        if not self._program_wanted or per_step or not self.options.prepared_weights:
            why = "program=False, a canary, hooks, unbound initializers or weights as stored"
            return None, f"the step loop: {why}"
        program, note = build_program(
            self._steps, self.graph, self._views, self._values, self._slot, self.arena, self.states
        )
        if program is not None:
            self.constant_bytes += program.copied_bytes  # the blob's copies
        return program, note

    @property
    def route(self) -> str:
        """How runs without per-step work go: "program" (one compiled call) or "steps" (the loop)."""
        return "program" if self.prepare()._program is not None else "steps"

    def invoker(self) -> Callable[[], Any]:
        """The model's compute alone, as TensorFlow Lite Micro's ``invoke()``: a callable computing
        from what the input buffers hold (`input_buffer`) into the output buffers, with no feeds
        checked, copies or stats; the compiled program bound to the arena, or a run of the step
        loop."""
        for name in self.prepare().graph.inputs:
            self.input_buffer(name)  # the caller's from now on: a run reads what it holds
        for name in self.graph.outputs:
            self.output_buffer(name)  # and returns these without a copy
        assert self.arena is not None
        return self.run if self._program is None else self._program.bound(self.arena)

    # ---- shared inputs (runtime.shared_inputs); caller memory: CallerMemoryMethods -------------------

    @property
    def unbound(self) -> list[str]:
        """Initializers declared unbound that `set_shared_input` has not bound yet."""
        return self._shared.missing

    def set_shared_input(self, name: str, array: np.ndarray) -> None:
        """Bind initializer `name`, declared in ``unbound=``, to `array` (read, never copied when
        C-contiguous and aligned). Binding it again is accepted only with equal data."""
        value = self._shared.bind(name, array, self.graph, self.params)
        if self._prepared:
            self._values[self._slot[name]] = value

    def _caller_memory(self) -> CallerMemory:
        """What `CallerMemoryMethods` works on: the prepared session's inputs and outputs."""
        self.prepare()
        assert self._io is not None
        return self._io

    def reset_state(self) -> None:
        """Every state back to its initial value, as TensorFlow Lite Micro's `Reset()` does."""
        self.prepare().states.reset(self.graph)

    # ---- run ---------------------------------------------------------------------------------------

    def run(
        self,
        inputs: Mapping[str, np.ndarray] | None = None,
        on_step: OnStep | None = None,
        *,
        measure: Measure | None = None,
    ) -> dict[str, np.ndarray]:
        """Run the model once; returns one array per graph output, in graph output order: a fresh
        copy, or (without a copy) the caller's bound array or the session's `output_buffer`.
        Inputs bound or written through `input_buffer` need no entry in `inputs`.

        `measure` (default: the session's `measure`): "time" runs without tracing, so that
        `stats.seconds` and the per-step times (`stats.trace`, `on_step`) are what the kernels
        take; "memory" traces the loop with tracemalloc to fill `stats.outside_arena_bytes`,
        and its times are inflated by the tracing."""
        measure = _checked_measure(self.measure if measure is None else measure)
        io = self._caller_memory()
        assert self.arena is not None and self.plan is not None
        if self._shared.names and self._shared.missing:  # the list made only when some were declared
            raise FeedError(
                f"shared input(s) {self.unbound} are declared unbound and not bound yet: call "
                "set_shared_input(name, array) before running"
            )
        on_step = on_step or self.on_step
        feeds = io.check_feeds(inputs or {})
        fallbacks = {n: b.reason for n, b in io.bindings.items() if b.reason is not None}
        stats = RunStats(
            self.plan.arena_bytes,
            None,
            0.0,
            constant_bytes=self.constant_bytes,
            fallbacks=fallbacks,
            measure=measure,
        )
        io.fill_inputs(feeds, stats, self._canary)
        external_outputs = io.external_outputs()
        if self._canary is not None:
            self._canary.begin()
        # Made before tracing starts, so that memplan's own bookkeeping is not counted beside the arena.
        step_seconds = np.zeros(len(self._steps))
        tracing = tracemalloc.is_tracing()  # a caller's own tracing: kept, and recorded as `traced`
        if measure == "memory":
            if not tracing:
                tracemalloc.start()
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
        stats.traced = tracemalloc.is_tracing()
        # A callback or after-node hooks (a capture's) need the step loop.
        program = self._program if on_step is None and not self._after else None
        try:
            if program is None:
                stats.seconds = self._loop(step_seconds, on_step)
            else:
                stats.seconds = program.run(self.arena)
            if measure == "memory":
                peak = tracemalloc.get_traced_memory()[1]
                stats.outside_arena_bytes = max(0, peak - base) + shared_scratch_held()
        finally:
            # Stop the tracing this run started, even when a step fails (a canary hit, say).
            if measure == "memory" and not tracing:
                tracemalloc.stop()
        if program is None:
            stats.route, stats.step_labels, stats.step_times = "steps", self._labels, step_seconds
        else:  # a program's run has no per-step times
            stats.route, stats.step_labels, stats.step_times = "program", (), None
        self.stats = stats
        return io.collect(external_outputs, stats)

    def capture(self, inputs: Mapping[str, np.ndarray] | None, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Run once and copy each named tensor right after the step that writes it, before the
        arena reuses its bytes (the witnesses of `runtime.conditioning`). Names no step of this graph
        writes (fused away, graph inputs, constants) are left out."""
        self.prepare()
        hooks, copies = copying_hooks(self._steps, self.graph, names, self._values, self._slot, self._after)
        saved, self._after = self._after, hooks
        try:
            self.run(inputs)
        finally:
            self._after = saved
        return copies

    def _loop(self, step_seconds: np.ndarray, on_step: OnStep | None) -> float:
        """The flat loop over the steps; each step's seconds go into `step_seconds`; returns the
        total. Without a canary, hooks or a callback, the loop is only the bound calls and one clock
        read per step; otherwise each step's kernel alone is timed, then the canary, hook and
        callback run."""
        # Small ufunc buffers set once for every step, not on each kernel call (`loop_ufunc_buffers`).
        with loop_ufunc_buffers():
            return self._steps_loop(step_seconds, on_step)

    def _steps_loop(self, step_seconds: np.ndarray, on_step: OnStep | None) -> float:
        values, calls = self._values, self._calls
        started = last = time.perf_counter()
        if self._canary is None and not self._after and on_step is None:
            # The bound calls, a float tiled stage's as one (at its first step).
            for index, bound in self._fast:
                try:
                    bound(values)
                except Exception as e:
                    raise self._failure(index, e) from e
                now = time.perf_counter()
                step_seconds[index], last = now - last, now
            return last - started
        after, total, canary = self._after, len(calls), self._canary
        for index, bound in enumerate(calls):
            t0 = time.perf_counter()
            try:
                bound(values)
            except Exception as e:
                raise self._failure(index, e) from e
            step_seconds[index] = time.perf_counter() - t0
            name = self._steps[index].node.name
            if canary is not None:
                canary.after(index, name)
            if index in after:
                after[index]()
            if on_step is not None:
                on_step(index, total, name, float(step_seconds[index]))
        return time.perf_counter() - started

    def _failure(self, index: int, error: Exception) -> ExecutionError:
        node = self._steps[index].node
        message = f"node {node.name!r} ({node.op_type}) failed: {type(error).__name__}: {error}"
        return ExecutionError(message, node.name)


def _checked_measure(measure: str) -> Measure:
    if measure not in MEASURES:
        raise ValueError(f"measure={measure!r}: accepted values are {MEASURES}")
    return measure  # type: ignore[return-value]  # checked above
