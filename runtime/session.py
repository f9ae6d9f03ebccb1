"""Running a loaded model inside one planned arena.

``Session(graph, plan).prepare()`` resolves every kernel (all unsupported ops are listed in
one error before anything runs), builds the memory problem, plans it when given a strategy
name, refuses a plan `planner.check_plan` rejects, allocates one 64-byte-aligned uint8
arena and makes every non-constant tensor a view ``arena[off:off+nbytes].view(dtype)
.reshape(shape)``. ``run(inputs)`` is then a flat loop over the steps.

Zero-copy I/O: `input_buffer`/`output_buffer` hand out the session's own buffers (arena
views under ``io="arena"``) so a caller writes inputs and reads outputs in place;
`bind_input`/`bind_output` make kernels read and write caller memory when it fits (see
`runtime.binding`) and copy, saying why, when it does not. `RunStats` counts every copy.

Parameters: with ``params=`` a `runtime.params.ParameterStore` the constants are shared,
read-only views (one allocation for every session holding the same bytes). Initializers
named in ``unbound=`` commit no memory at prepare and are bound by `set_shared_input`.
An ``arena=`` given by the caller (see `runtime.batches`) is used instead of a new one.

Variations are hooks, not copies: ``problem=`` plans a prebuilt problem of the graph instead of
`memory_problem` (a training step's, see `runtime.training.session`), and ``after_node=`` runs
a callable right after the named node, before the next step (a training step's loss check,
which raises to stop the run before any update).

Honest memory: while the loop runs, tracemalloc (which sees numpy's data allocations)
measures the peak of bytes allocated outside the arena; the arena itself and the returned
outputs are allocated outside that window, so what is reported is what kernels and the
dispatcher allocated on the side.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import planner
from planner import Plan, Problem
from planner.aliases import alias_roots
from runtime.binding import Binding, make_binding
from runtime.canary import Canary
from runtime.errors import ExecutionError, InputError, ModelError, PlanError, TensorTooLargeError, UnsupportedOpError
from runtime.graph import Graph, Node, TensorInfo
from runtime.kernels import Kernel, call, kernel_of
from runtime.options import DEFAULT_ALIGNMENT, MemoryOptions
from runtime.problem import check_aliases, memory_problem, workspace_id

if TYPE_CHECKING:
    from runtime.params import ParameterStore

OnStep = Callable[[int, int, str, float], None]  # (index, total, node name, seconds)
AfterNode = Callable[[], None]  # runs right after its node, before the next step; may raise to stop the run
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
    fallbacks: dict[str, str] = field(default_factory=dict)  # bound tensor -> why it was copied

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
        options: MemoryOptions | None = None,
        *,
        canary: bool = False,
        check: bool = True,
        measure_memory: bool = True,
        max_arena_bytes: int = DEFAULT_MAX_ARENA_BYTES,
        on_step: OnStep | None = None,
        params: ParameterStore | None = None,
        unbound: Iterable[str] = (),
        arena: np.ndarray | None = None,
        io_alignment: int = 0,
        problem: Problem | None = None,
        after_node: Mapping[str, AfterNode] | None = None,
    ) -> None:
        self.graph = graph
        self.options = options or MemoryOptions()
        self._problem_arg = problem  # prebuilt (a training step's): planned as given instead of memory_problem
        self._after_node = dict(after_node or {})
        self.canary = canary
        self.check = check  # False only to prove the canary: runs a plan the checker would refuse
        self.measure_memory = measure_memory
        self.max_arena_bytes = max_arena_bytes
        self.on_step = on_step
        self._plan_arg = plan
        self.params = params
        self.io_alignment = io_alignment  # 0: a bound array needs only its element's alignment
        self._arena_arg = arena
        self._unbound = tuple(dict.fromkeys(unbound))
        self._shared: dict[str, np.ndarray] = {}  # unbound initializers bound so far
        self._bindings: dict[str, Binding] = {}
        self._own_io: set[str] = set()  # inputs/outputs whose session buffer the caller holds
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
        self._check_unbound()
        if self.params is not None:
            self.graph = self.params.share(self.graph, skip=self._unbound)
        problem = self._problem_arg
        if problem is None:
            problem = memory_problem(self.graph, self.options)
            # A prebuilt problem's aliases are its builder's contract: a training step's updates
            # overwrite the parameters (graph outputs) on purpose.
            check_aliases(self.graph, problem)
        plan = planner.plan(problem, self._plan_arg) if isinstance(self._plan_arg, str) else self._plan_arg
        self._check_plan(problem, plan)
        if plan.arena_bytes > self.max_arena_bytes:
            raise TensorTooLargeError(
                f"the arena of plan {plan.strategy!r} is {plan.arena_bytes:,} bytes, more than max_arena_bytes="
                f"{self.max_arena_bytes:,}; refused before allocating"
            )
        self.problem, self.plan = problem, plan
        self.arena = self._take_arena(plan.arena_bytes)
        self._bind_views(problem, plan)
        self._steps = [self._compile(node, kernels[node.name]) for node in self.graph.nodes]
        self._after = self._after_hooks()
        self._canary = None
        if self.canary:
            # An input overwritten in place is written by the step too.
            where = {b.id: r for b, r in zip(problem.buffers, alias_roots(problem), strict=True)}
            writes = [
                [*(n for n in s.node.outputs if n), workspace_id(s.node), *self._overwritten(s, where)]
                for s in self._steps
            ]
            self._canary = Canary(problem, plan, self.arena, writes)
        self._prepared = True
        return self

    def _resolve_kernels(self) -> dict[str, Kernel]:
        found: dict[str, Kernel] = {}
        missing: dict[str, list[str]] = {}
        for node in self.graph.nodes:
            k = kernel_of(node)
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
            if b.id not in self.graph.tensors:  # kernel scratch ("<node>::ws"), whatever its kind
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
            if name in self._unbound:  # committed only when set_shared_input binds it
                self._values[self._slot[name]] = self._shared.get(name)
                continue
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
        if node.op_type == "Concat" and node.outputs[0] in self._views:
            kernel, skip = _concat_in_place(node, kernel, self.graph, self._views, self._views[node.outputs[0]])
        return _Step(node, kernel, ins, outs, ws, skip, dict(node.attributes))

    def _after_hooks(self) -> dict[int, AfterNode]:
        index = {s.node.name: i for i, s in enumerate(self._steps)}
        unknown = [n for n in self._after_node if n not in index]
        if unknown:
            raise ModelError(f"after_node names {unknown}, which are not nodes of {self.graph.name!r}")
        return {index[n]: hook for n, hook in self._after_node.items()}

    def _overwritten(self, step: _Step, where: Mapping[str, tuple[int, int]]) -> list[str]:
        """Inputs the problem declares output 0 is written over (in place): same alias root
        and offset. Declared, not measured, so the canary still sees a plan that overlaps."""
        out = step.node.outputs[0] if step.node.outputs else ""
        if step.skip or out not in where:
            return []
        return [n for n in step.node.inputs if n != out and where.get(n) == where[out]]

    def _check_unbound(self) -> None:
        accepted = [n for n, c in self.graph.constants.items() if c.source in ("initializer", "external")]
        wrong = [n for n in self._unbound if n not in accepted]
        if wrong:
            raise ModelError(
                f"unbound={wrong}: only initializers the graph still reads can be left unbound; accepted: {accepted}"
            )

    def _take_arena(self, nbytes: int) -> np.ndarray:
        """A fresh aligned arena, or the first `nbytes` of the caller's (which must fit)."""
        align = max(self.options.alignment, DEFAULT_ALIGNMENT)
        given = self._arena_arg
        if given is None:
            return _aligned_arena(nbytes, align)
        fits = (
            isinstance(given, np.ndarray)
            and given.dtype == np.uint8
            and given.ndim == 1
            and given.flags.c_contiguous
            and given.flags.writeable
        )
        if not fits:
            raise PlanError("arena: pass a writable, C-contiguous, one-dimensional uint8 array")
        if given.size < nbytes or given.ctypes.data % align:
            raise PlanError(
                f"arena: the plan needs {nbytes:,} bytes aligned to {align}; the given arena has {given.size:,} "
                f"bytes at an address {given.ctypes.data % align} bytes past a multiple of {align}"
            )
        return given[:nbytes]

    # ---- caller memory: zero-copy inputs and outputs, shared inputs ----------------------------------

    @property
    def bindings(self) -> dict[str, Binding]:
        return dict(self._bindings)

    @property
    def unbound(self) -> list[str]:
        """Initializers declared unbound that `set_shared_input` has not bound yet."""
        return [n for n in self._unbound if n not in self._shared]

    def input_buffer(self, name: str) -> np.ndarray:
        """The session's own buffer for graph input `name`: write it before each run, then call
        `run()` without that input. Under ``io="arena"`` it is the arena view (its bytes are reused
        once the input is dead, so write it again before every run)."""
        self.prepare()
        self._io_info(name, "input")
        if name in self._views:
            self._own_io.add(name)
            return self._views[name]
        if name not in self._own_io:
            t = self.graph.tensors[name]
            self.bind_input(name, _aligned_arena(t.nbytes, DEFAULT_ALIGNMENT).view(t.dtype).reshape(t.shape))
            self._own_io.add(name)
        return self._bindings[name].array

    def output_buffer(self, name: str) -> np.ndarray:
        """The buffer graph output `name` is computed into, read-only: `run` returns it without a
        copy, and its contents stay valid until the next run of any session sharing the arena."""
        self.prepare()
        self._io_info(name, "output")
        if name in self._views:
            self._own_io.add(name)
            return _read_only(self._views[name])
        if name not in self._own_io:
            t = self.graph.tensors[name]
            self.bind_output(name, _aligned_arena(t.nbytes, DEFAULT_ALIGNMENT).view(t.dtype).reshape(t.shape))
            self._own_io.add(name)
        return _read_only(self._bindings[name].array)

    def bind_input(self, name: str, array: np.ndarray) -> Binding:
        """Read graph input `name` from the caller's `array` on every run (which then needs no
        value for it). Zero-copy when it fits, else copied each run: see the Binding's reason."""
        return self._bind(name, "input", array)

    def bind_output(self, name: str, array: np.ndarray) -> Binding:
        """Compute graph output `name` into the caller's `array` (returned by `run` too)."""
        return self._bind(name, "output", array)

    def _bind(self, name: str, role: str, array: np.ndarray) -> Binding:
        self.prepare()
        info = self._io_info(name, role)
        others = [b for n, b in self._bindings.items() if n != name]
        binding = make_binding(
            name, role, array, info, in_arena=name in self._views, alignment=self.io_alignment, others=others
        )
        self._bindings[name] = binding
        self._own_io.discard(name)
        return binding

    def _io_info(self, name: str, role: str) -> TensorInfo:
        names = self.graph.inputs if role == "input" else self.graph.outputs
        if name not in names:
            hint = "; it is an initializer: see set_shared_input" if name in self.graph.constants else ""
            raise InputError(
                f"{name!r} is not a graph {role} of {self.graph.name!r}{hint}; its {role}s are {list(names)}"
            )
        return self.graph.tensors[name]

    def set_shared_input(self, name: str, array: np.ndarray) -> None:
        """Bind initializer `name`, declared in ``unbound=``, to `array` (read, never copied when
        C-contiguous and aligned). Binding it again is accepted only with equal data."""
        if name not in self._unbound:
            raise InputError(
                f"{name!r} was not declared unbound; the session's unbound initializers are {list(self._unbound)}"
            )
        c = self.graph.constants[name]
        want = f"{c.dtype}{list(c.shape)}"
        if not isinstance(array, np.ndarray) or array.shape != c.shape or array.dtype != c.dtype:
            got = f"{array.dtype}{list(array.shape)}" if isinstance(array, np.ndarray) else type(array).__name__
            raise InputError(f"shared input {name!r}: got {got}; it is declared {want}")
        held = self._shared.get(name)
        if held is not None:
            if held.base is array or held is array or np.array_equal(held, array):
                return
            raise InputError(
                f"shared input {name!r} is already bound to different data; a shared input is bound once per session"
            )
        value = array if array.flags.c_contiguous and array.flags.aligned else np.ascontiguousarray(array)
        if self.params is not None:
            value = self.params.intern(value)
        self._shared[name] = _read_only(value)
        if self._prepared:
            self._values[self._slot[name]] = self._shared[name]

    # ---- run ---------------------------------------------------------------------------------------

    def run(
        self, inputs: Mapping[str, np.ndarray] | None = None, on_step: OnStep | None = None
    ) -> dict[str, np.ndarray]:
        """Run the model once; returns one array per graph output, in graph output order: a fresh
        copy, or (without a copy) the caller's bound array or the session's `output_buffer`.
        Inputs bound or written through `input_buffer` need no entry in `inputs`."""
        self.prepare()
        assert self.arena is not None and self.plan is not None
        if self.unbound:
            raise InputError(
                f"shared input(s) {self.unbound} are declared unbound and not bound yet: call "
                "set_shared_input(name, array) before running"
            )
        on_step = on_step or self.on_step
        feeds = self._check_inputs(inputs or {})
        fallbacks = {n: b.reason for n, b in self._bindings.items() if b.reason is not None}
        stats = RunStats(self.plan.arena_bytes, None, 0.0, constant_bytes=self.constant_bytes, fallbacks=fallbacks)
        self._fill_inputs(feeds, stats)
        external_outputs = self._external_outputs()
        if self._canary is not None:
            self._canary.begin()
        values = self._values
        after = self._after
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
                if index in after:
                    after[index]()
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
        supplied = set(self._bindings) | self._own_io
        missing = [n for n in expected if n not in inputs and n not in supplied]
        unknown = [n for n in inputs if n not in expected]
        if missing or unknown:
            want = ", ".join(f"{n!r}: {t.dtype}{list(t.shape)}" for n, t in expected.items())
            raise InputError(f"inputs missing {missing} / unknown {unknown}; the model takes {{{want}}}")
        feeds = {}
        for name, t in expected.items():
            if name not in inputs:
                continue
            array = np.asarray(inputs[name])
            if array.shape != t.shape:
                raise InputError(f"input {name!r} has shape {list(array.shape)}; the model is bound to {list(t.shape)}")
            if array.dtype != t.dtype:
                if array.dtype.kind != t.dtype.kind:
                    raise InputError(f"input {name!r} has dtype {array.dtype}; the model takes {t.dtype}")
                array = array.astype(t.dtype)
            feeds[name] = array
        return feeds

    def _fill_inputs(self, feeds: dict[str, np.ndarray], stats: RunStats) -> None:
        """Inputs given to `run` are copied; bound ones are read in place or copied as their
        binding says; `input_buffer` ones are already there."""
        in_place = [n for n in self.graph.inputs if n in self._views and n not in feeds and n not in self._bindings]
        if self._canary is not None:
            # The canary poisons the whole arena first: keep what the caller wrote in place.
            kept = {n: self._views[n].copy() for n in in_place}
            self._canary.start([n for n in self.graph.inputs if n in self._views])
            for n, array in kept.items():
                self._views[n][...] = array
        for name in self.graph.inputs:
            if name in feeds:
                self._feed(name, feeds[name], stats)
            elif name in self._bindings:
                self._feed_bound(self._bindings[name], stats)

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

    def _feed_bound(self, binding: Binding, stats: RunStats) -> None:
        name = binding.name
        if binding.zero_copy:
            self._values[self._slot[name]] = _read_only(binding.array)
            return
        if name in self._views:
            self._views[name][...] = binding.array
        else:
            t = self.graph.tensors[name]
            self._values[self._slot[name]] = _read_only(np.array(binding.array, dtype=t.dtype, order="C"))
        stats.copies += 1
        stats.copied_bytes += binding.nbytes

    def _external_outputs(self) -> dict[str, np.ndarray]:
        """Where outputs planned outside the arena are computed: the caller's bound array when it
        fits, else a fresh array (copied into a bound array after the run)."""
        out = {}
        for name in self.graph.outputs:
            t = self.graph.tensors.get(name)
            if t is not None and t.producer is not None and name not in self._views:
                b = self._bindings.get(name)
                out[name] = b.array if b is not None and b.zero_copy else np.empty(t.shape, t.dtype)
                self._values[self._slot[name]] = out[name]
        return out

    def _collect(self, external: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        results = {}
        for name in self.graph.outputs:
            b = self._bindings.get(name)
            if name in external:
                source = external[name]
                if b is None or b.zero_copy:
                    results[name] = source
                    continue
            else:
                value = self._views[name] if name in self._views else self._values[self._slot[name]]
                assert value is not None
                source = value
                if b is None and name in self._own_io:
                    results[name] = _read_only(source)
                    continue
            if b is not None:
                np.copyto(b.array, source, casting="unsafe")
                results[name] = b.array
            else:
                results[name] = np.array(source, copy=True)
            stats.copies += 1
            stats.copied_bytes += source.nbytes
        return results


def _concat_in_place(
    node: Node, kernel: Kernel, graph: Graph, views: Mapping[str, np.ndarray], out: np.ndarray
) -> tuple[Kernel, bool]:
    """A Concat some of whose inputs already sit in their slice of the output (concat in
    place): a kernel that copies only the others, and whether there is nothing to do."""
    axis = int(node.attributes.get("axis", 0)) % max(out.ndim, 1)
    pending, at = [], 0
    for k, name in enumerate(node.inputs):
        width = graph.tensors[name].shape[axis]
        index = (slice(None),) * axis + (slice(at, at + width),)
        at += width
        x = views.get(name)
        if x is None or not x.size or _address(x) != _address(out[index]):
            pending.append((k, index))
    if len(pending) == len(node.inputs):
        return kernel, False

    def copy_the_rest(*inputs: np.ndarray, out: np.ndarray, **_: Any) -> None:
        for k, index in pending:
            out[index] = inputs[k]

    return Kernel(node.op_type, copy_the_rest), not pending


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _aligned_arena(nbytes: int, alignment: int) -> np.ndarray:
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift : shift + nbytes]


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
