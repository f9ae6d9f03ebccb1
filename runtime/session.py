"""Running a loaded model inside one planned arena.

``Session(graph, plan).prepare()`` resolves every kernel (all unsupported ops are listed in
one error before anything runs), builds the memory problem, plans it when given a strategy
name, refuses a plan `planner.check_plan` rejects, allocates one 64-byte-aligned uint8
arena and makes every non-constant tensor a view ``arena[off:off+nbytes].view(dtype)
.reshape(shape)``. ``run(inputs)`` is then a flat loop over the steps.

Honest memory: while the loop runs, tracemalloc (which sees numpy's data allocations)
measures the peak of bytes allocated outside the arena; the arena itself and the returned
outputs are allocated outside that window, so what is reported is what kernels and the
dispatcher allocated on the side.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import planner
from planner import Plan, Problem
from runtime.canary import Canary
from runtime.errors import ExecutionError, InputError, PlanError, TensorTooLargeError, UnsupportedOpError
from runtime.graph import Graph, Node
from runtime.kernels import Kernel, call, get_kernel
from runtime.problem import DEFAULT_ALIGNMENT, memory_problem, workspace_id

OnStep = Callable[[int, int, str, float], None]  # (index, total, node name, seconds)
DEFAULT_MAX_ARENA_BYTES = 16 << 30


@dataclass(frozen=True)
class StepRecord:
    index: int
    node: str
    op_type: str
    seconds: float


@dataclass
class RunStats:
    """What one `run` cost: the arena, bytes allocated beside it, time per step, copies."""

    arena_bytes: int
    outside_arena_bytes: int | None  # tracemalloc peak during the loop; None when not measured
    seconds: float
    trace: list[StepRecord] = field(default_factory=list)
    copies: int = 0  # arrays copied into or out of the arena (inputs, outputs, non-aliased views)
    copied_bytes: int = 0
    constant_bytes: int = 0  # parameters, kept outside the arena

    @property
    def step_seconds(self) -> list[float]:
        return [r.seconds for r in self.trace]

    @property
    def outside_ratio(self) -> float | None:
        if self.outside_arena_bytes is None:
            return None
        return self.outside_arena_bytes / self.arena_bytes if self.arena_bytes else 0.0


@dataclass
class _Step:
    node: Node
    kernel: Kernel
    inputs: list[int]  # slot per input, -1 for an omitted one
    outputs: list[np.ndarray | int | None]  # arena view, slot of an external output, or None
    ws: np.ndarray | None
    skip: bool  # a view whose output already is its input's bytes: nothing to do
    attributes: dict[str, Any] = field(default_factory=dict)  # parsed once, at prepare


class Session:
    """Run `graph` inside the arena of `plan` (a Plan, or the name of a strategy to plan with)."""

    def __init__(
        self,
        graph: Graph,
        plan: Plan | str = planner.DEFAULT_STRATEGY,
        *,
        io: str = "arena",
        workspace: bool = True,
        alignment: int = DEFAULT_ALIGNMENT,
        canary: bool = False,
        check: bool = True,
        measure_memory: bool = True,
        max_arena_bytes: int = DEFAULT_MAX_ARENA_BYTES,
        on_step: OnStep | None = None,
    ) -> None:
        self.graph = graph
        self.io = io
        self.workspace = workspace
        self.alignment = alignment
        self.canary = canary
        self.check = check  # False only to prove the canary: runs a plan the checker would refuse
        self.measure_memory = measure_memory
        self.max_arena_bytes = max_arena_bytes
        self.on_step = on_step
        self._plan_arg = plan
        self.problem: Problem | None = None
        self.plan: Plan | None = None
        self.arena: np.ndarray | None = None
        self.stats: RunStats | None = None
        self._prepared = False

    # ---- prepare -----------------------------------------------------------------------------------

    def prepare(self) -> Session:
        """Resolve kernels, plan, check the plan, allocate the arena and bind every view. Idempotent."""
        if self._prepared:
            return self
        kernels = self._resolve_kernels()
        problem = memory_problem(self.graph, io=self.io, workspace=self.workspace, alignment=self.alignment)
        plan = planner.plan(problem, self._plan_arg) if isinstance(self._plan_arg, str) else self._plan_arg
        self._check_plan(problem, plan)
        if plan.arena_bytes > self.max_arena_bytes:
            raise TensorTooLargeError(
                f"the arena of plan {plan.strategy!r} is {plan.arena_bytes:,} bytes, more than max_arena_bytes="
                f"{self.max_arena_bytes:,}; refused before allocating"
            )
        self.problem, self.plan = problem, plan
        self.arena = _aligned_arena(plan.arena_bytes, max(self.alignment, 64))
        self._bind_views(problem, plan)
        self._steps = [self._compile(node, kernels[node.name]) for node in self.graph.nodes]
        self._canary = None
        if self.canary:
            writes = [[*(n for n in s.node.outputs if n), workspace_id(s.node)] for s in self._steps]
            self._canary = Canary(problem, plan, self.arena, writes)
        self._prepared = True
        return self

    def _resolve_kernels(self) -> dict[str, Kernel]:
        found: dict[str, Kernel] = {}
        missing: dict[str, list[str]] = {}
        for node in self.graph.nodes:
            k = get_kernel(node.op_type) if node.domain in ("", "ai.onnx") else None
            if k is None:
                label = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
                missing.setdefault(label, []).append(node.name)
                continue
            used = [n for n in node.outputs[1:] if n]
            if used and not k.multi_output:
                missing.setdefault(f"{node.op_type} with {len(used) + 1} outputs", []).append(node.name)
                continue
            found[node.name] = k
        if missing:
            listed = "; ".join(
                f"{op} (node{'s' if len(ns) > 1 else ''} {', '.join(map(repr, ns[:5]))}{', ...' if len(ns) > 5 else ''})"
                for op, ns in sorted(missing.items())
            )
            raise UnsupportedOpError(
                f"memplan has no kernel for: {listed}; see runtime.kernels.supported_ops()", missing
            )
        return found

    def _check_plan(self, problem: Problem, plan: Plan) -> None:
        missing = [b.id for b in problem.buffers if b.id not in plan.offsets]
        if missing:
            raise PlanError(
                f"plan {plan.strategy!r} places no offset for buffer(s) {missing[:10]}; was it made for this model and options?"
            )
        if self.check:
            result = planner.check_plan(problem, plan)
            if not result.ok:
                raise PlanError(f"plan {plan.strategy!r} is not valid for this model's memory problem: {result}")

    def _bind_views(self, problem: Problem, plan: Plan) -> None:
        """A writable and a read-only view per arena tensor, slots for everything a step reads."""
        assert self.arena is not None
        self._views: dict[str, np.ndarray] = {}
        self._ws: dict[str, np.ndarray] = {}
        for b in problem.buffers:
            off = plan.offsets[b.id].offset
            raw = self.arena[off : off + b.size]
            if b.kind == "workspace":
                self._ws[b.id] = raw
            else:
                t = self.graph.tensors[b.id]
                self._views[b.id] = raw.view(t.dtype).reshape(t.shape)
        self._slot: dict[str, int] = {}
        self._values: list[np.ndarray | None] = []
        for name in self.graph.tensors:
            self._slot[name] = len(self._values)
            self._values.append(None)
        for name, view in self._views.items():
            self._values[self._slot[name]] = _read_only(view)
        self.constant_bytes = 0
        for name, c in self.graph.constants.items():
            value = c.value()
            self.constant_bytes += value.nbytes
            if name in self._views:  # constants planned into the arena
                self._views[name][...] = value
            else:
                self._values[self._slot[name]] = value

    def _compile(self, node: Node, kernel: Kernel) -> _Step:
        ins = [self._slot[n] if n else -1 for n in node.inputs]
        outs: list[np.ndarray | int | None] = []
        for n in node.outputs:
            outs.append(None if not n else self._views[n] if n in self._views else self._slot[n])
        ws = self._ws.get(workspace_id(node))
        skip = False
        if kernel.view and node.outputs and node.outputs[0] in self._views and node.inputs[0] in self._views:
            a, b = self._views[node.inputs[0]], self._views[node.outputs[0]]
            same = a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            skip = same and not any(node.outputs[1:])
        return _Step(node, kernel, ins, outs, ws, skip, dict(node.attributes))

    # ---- run ---------------------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, np.ndarray], on_step: OnStep | None = None) -> dict[str, np.ndarray]:
        """Run the model once; returns a fresh array per graph output, in graph output order."""
        self.prepare()
        assert self.arena is not None and self.plan is not None
        on_step = on_step or self.on_step
        feeds = self._check_inputs(inputs)
        stats = RunStats(self.plan.arena_bytes, None, 0.0, constant_bytes=self.constant_bytes)
        if self._canary is not None:
            self._canary.start([n for n in self.graph.inputs if n in self._views])
        for name, array in feeds.items():
            self._feed(name, array, stats)
        external_outputs = self._external_outputs()
        if self._canary is not None:
            self._canary.begin()
        values = self._values
        total = len(self._steps)
        tracing = tracemalloc.is_tracing()
        if self.measure_memory:
            if not tracing:
                tracemalloc.start()
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
        # Preallocated so that memplan's own bookkeeping does not count as bytes beside the arena.
        step_seconds = np.zeros(total)
        started = time.perf_counter()
        try:
            for index, step in enumerate(self._steps):
                t0 = time.perf_counter()
                if not step.skip:
                    self._execute(step, values)
                step_seconds[index] = time.perf_counter() - t0
                if self._canary is not None:
                    self._canary.after(index, step.node.name)
                if on_step is not None:
                    on_step(index, total, step.node.name, float(step_seconds[index]))
            stats.seconds = time.perf_counter() - started
            if self.measure_memory:
                stats.outside_arena_bytes = max(0, tracemalloc.get_traced_memory()[1] - base)
        finally:
            # Stop the tracing this run started, even when a step fails (a canary hit, say).
            if self.measure_memory and not tracing:
                tracemalloc.stop()
        stats.trace = [
            StepRecord(i, s.node.name, s.node.op_type, float(t))
            for i, (s, t) in enumerate(zip(self._steps, step_seconds, strict=True))
        ]
        self.stats = stats
        return self._collect(external_outputs, stats)

    def _execute(self, step: _Step, values: list[np.ndarray | None]) -> None:
        node = step.node
        ins = [values[k] if k >= 0 else None for k in step.inputs]
        outs = [values[o] if isinstance(o, int) else o for o in step.outputs]
        try:
            call(step.kernel, ins, outs, step.ws, step.attributes, node.opset)
        except Exception as e:
            raise ExecutionError(
                f"node {node.name!r} ({node.op_type}) failed: {type(e).__name__}: {e}", node.name
            ) from e

    def _check_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        expected = {n: self.graph.tensors[n] for n in self.graph.inputs}
        missing = [n for n in expected if n not in inputs]
        unknown = [n for n in inputs if n not in expected]
        if missing or unknown:
            want = ", ".join(f"{n!r}: {t.dtype}{list(t.shape)}" for n, t in expected.items())
            raise InputError(f"inputs missing {missing} / unknown {unknown}; the model takes {{{want}}}")
        feeds = {}
        for name, t in expected.items():
            array = np.asarray(inputs[name])
            if array.shape != t.shape:
                raise InputError(f"input {name!r} has shape {list(array.shape)}; the model is bound to {list(t.shape)}")
            if array.dtype != t.dtype:
                if array.dtype.kind != t.dtype.kind:
                    raise InputError(f"input {name!r} has dtype {array.dtype}; the model takes {t.dtype}")
                array = array.astype(t.dtype)
            feeds[name] = array
        return feeds

    def _feed(self, name: str, array: np.ndarray, stats: RunStats) -> None:
        if name in self._views:
            self._views[name][...] = array
            stats.copies += 1
            stats.copied_bytes += array.nbytes
            return
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
            stats.copies += 1
            stats.copied_bytes += array.nbytes
        self._values[self._slot[name]] = _read_only(array)

    def _external_outputs(self) -> dict[str, np.ndarray]:
        out = {}
        for name in self.graph.outputs:
            t = self.graph.tensors.get(name)
            if t is not None and t.producer is not None and name not in self._views:
                out[name] = np.empty(t.shape, t.dtype)
                self._values[self._slot[name]] = out[name]
        return out

    def _collect(self, external: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        results = {}
        for name in self.graph.outputs:
            if name in external:
                results[name] = external[name]
                continue
            source = self._views.get(name)
            if source is None:
                value = self._values[self._slot[name]]
                assert value is not None
                source = value
            results[name] = np.array(source, copy=True)
            stats.copies += 1
            stats.copied_bytes += source.nbytes
        return results


def _aligned_arena(nbytes: int, alignment: int) -> np.ndarray:
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift : shift + nbytes]


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
