"""From a loaded `Graph` to the planner's `Problem`: one step per node, one buffer per tensor.

Kinds: graph inputs are "input", graph outputs "output", other node results "activation",
kernel scratch "workspace" (id ``"<node>::ws"``, live for its one step, so the planner
places intra-operator scratch and inter-operator tensors in one arena, as TVM's Unified
Static Memory Planner does). Constants stay out of the arena unless
``constants="arena"`` asks for them (then kind "constant", live for the whole schedule).

View ops (the kernel registers ``view=True``: Reshape, Flatten, Squeeze, Unsqueeze,
Identity, Dropout at inference) alias their input: their output is the same bytes. They
copy instead when the input is a constant or either side lives outside the arena.
Two more forms of alias are on by default and can each be switched off to see what they
save (see `runtime.inplace`): ``inplace`` writes an elementwise op's output over an input
that dies at that step, ``concat_inplace`` has Concat's producers write straight into their
slices of its output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import replace

import planner
from planner import Problem, Schedule, Step, problem_from_schedule
from planner.lifetimes import live_ranges
from planner.reorder import Reordered, reorder
from runtime.errors import ModelError, PlanError
from runtime.graph import Graph, Node
from runtime.inplace import AliasGroups, alias_hazards, narrowing_links, plan_concat_in_place, plan_in_place
from runtime.kernels import MEMPLAN_DOMAIN, TensorMeta, kernel_of, weights_kwargs
from runtime.options import MemoryOptions

CONSTANT_MODES = ("exclude", "arena")


def workspace_id(node: Node) -> str:
    return f"{node.name}::ws"


def memory_problem(
    graph: Graph,
    options: MemoryOptions | None = None,
    *,
    constants: str = "exclude",
    name: str | None = None,
) -> Problem:
    """The planning problem of `graph` in schedule order.

    ``options.io="external"`` leaves graph inputs and outputs out of the arena (the caller owns
    their memory); ``options.workspace=False`` asks kernels for no scratch (they allocate their
    own, outside the arena). Buffer ids are tensor names, plus ``"<node>::ws"`` for scratch.
    ``options.inplace`` and ``options.concat_inplace`` switch those aliases on or off (views
    always alias); ``options.prepared_weights=False`` sizes scratch for kernels that read their
    weights as stored (im2col's instead of Winograd's).
    """
    options = options or MemoryOptions()
    schedule = memory_schedule(graph, options, constants=constants)
    problem = problem_from_schedule(schedule, alignment=options.alignment, name=name or graph.name)
    return problem.replace(buffers=tuple(replace(b, name=_buffer_name(b.id, b.kind)) for b in problem.buffers))


def memory_schedule(graph: Graph, options: MemoryOptions | None = None, *, constants: str = "exclude") -> Schedule:
    """The planner's neutral schedule of `graph`: per node, what it reads, writes and uses as
    scratch, and which tensors share bytes (views, in place, concat in place; a concat slice
    is aliased only at a multiple of ``options.alignment``).

    Outputs written over a wider input (`Kernel.narrowing`: a quantized model's int8 input over
    its float one) bind a tall block that dies at once to a small one that lives on, which can
    cost greedy placements more than the step's bytes saved, its LOAD unchanged: they are kept
    only where the default strategy places the schedule in a smaller arena with them than without."""
    options = options or MemoryOptions()
    schedule = _schedule(graph, options, constants, narrowing=True)
    if not narrowing_links(graph, schedule.aliases):
        return schedule
    plain = _schedule(graph, options, constants, narrowing=False)
    return schedule if _placed(schedule, options) < _placed(plain, options) else plain


def _placed(schedule: Schedule, options: MemoryOptions) -> int:
    """The arena of the default strategy's plan of `schedule`."""
    problem = problem_from_schedule(schedule, alignment=options.alignment)
    return planner.plan(problem, planner.DEFAULT_STRATEGY).arena_bytes


def _schedule(graph: Graph, options: MemoryOptions, constants: str, *, narrowing: bool) -> Schedule:
    """`memory_schedule`, with outputs over wider inputs or without."""
    if constants not in CONSTANT_MODES:
        raise ModelError(f"constants={constants!r}: accepted values are {CONSTANT_MODES}")
    external = set(graph.inputs) | set(graph.outputs) if options.io == "external" else set()
    const_names = set(graph.constants)
    in_arena_consts = const_names if constants == "arena" else set()
    steps, sizes, kinds, aliases = [], {}, {}, {}
    for name, t in graph.tensors.items():
        sizes[name] = t.nbytes
        kinds[name] = t.kind
    for node in graph.nodes:
        scratch: tuple[str, ...] = ()
        ws = workspace_bytes(graph, node, prepared_weights=options.prepared_weights) if options.workspace else 0
        if ws:
            wid = workspace_id(node)
            if wid in graph.tensors:
                raise ModelError(f"node {node.name!r}: its workspace id {wid!r} collides with a tensor of that name")
            scratch = (wid,)
            sizes[wid] = ws
            kinds[wid] = "workspace"
        reads = tuple(dict.fromkeys(n for n in node.inputs if n and (n not in const_names or n in in_arena_consts)))
        steps.append(Step(node.name, reads=reads, writes=tuple(n for n in node.outputs if n), scratch=scratch))
        source = view_source(graph, node, external | (const_names - in_arena_consts))
        if source is not None:
            aliases[node.outputs[0]] = (source, 0)
    consts = tuple(sorted(in_arena_consts))
    schedule = Schedule(
        steps=steps,
        sizes=sizes,
        inputs=tuple(graph.inputs) + consts,
        outputs=tuple(graph.outputs) + consts,
        kinds=kinds,
        aliases=aliases,
        excluded=frozenset(external),
    )
    if not (options.inplace or options.concat_inplace):
        return schedule
    outside = external | (const_names - in_arena_consts)
    groups = AliasGroups(aliases, sizes)
    ranges = live_ranges(schedule)
    # In place first: it never costs bytes, while a concat slice is taken only when it lowers
    # the peak of what is live then.
    if options.inplace:
        added = plan_in_place(graph, groups, ranges, outside, narrowing=narrowing)
        if _tiled(graph):
            added = _unpinned(added, ranges)
            groups = AliasGroups({**aliases, **added}, sizes)
        aliases.update(added)
    if options.concat_inplace:
        aliases.update(plan_concat_in_place(graph, groups, outside, options.alignment, ranges))
    return dataclasses.replace(schedule, aliases=aliases)


# In a tiled stage a band's one-step tiles (a window gathered for a 3x3 convolution, its output)
# are tall and short-lived, while a row that a later band reads lives for several bands. An
# in-place link from such a row onto a one-step tile saves no peak bytes, but it puts the row at
# the base of the tile's group, so every later tall tile needs a hole above rows pinned at many
# different offsets: MobileNetV2's 21-node head placed at 1.5x its LOAD so, 1.1x without them.
SHORT_STEPS = 2  # an input living at most this many steps after its first is a band's tile
LONG_STEPS = 4  # an output living longer than this waits for a later band


def _tiled(graph: Graph) -> bool:
    from runtime.tiling.rows import OP_TYPE  # here: runtime.tiling imports this module

    return any(n.op_type == OP_TYPE and n.domain == MEMPLAN_DOMAIN for n in graph.nodes)


def _unpinned(links: dict[str, tuple[str, int]], ranges: Mapping[str, tuple[int, int]]) -> dict[str, tuple[str, int]]:
    """The in-place links without those that put a long-lived output over a one-step input."""

    def span(name: str) -> int:
        first, last = ranges[name]
        return last - first

    return {
        out: (source, offset)
        for out, (source, offset) in links.items()
        if not (span(source) <= SHORT_STEPS and span(out) > LONG_STEPS)
    }


def check_aliases(graph: Graph, problem: Problem) -> None:
    """Refuse (PlanError) a problem whose aliases would make a kernel read overwritten data,
    naming the node and the tensors."""
    hazards = alias_hazards(graph, problem)
    if hazards:
        more = f" (+{len(hazards) - 5} more)" if len(hazards) > 5 else ""
        raise PlanError(f"unsafe alias: {'; '.join(hazards[:5])}{more}")


def reorder_graph(
    graph: Graph, options: MemoryOptions | None = None, *, time_limit: float = 1.0, seed: int = 0
) -> tuple[Graph, Reordered]:
    """`graph` with its nodes in a memory-aware order (see `planner.reorder`), and the search's
    figures: its method (exact, divided, heuristic) and whether the order is proven optimal
    (`Reordered.describe()` says both in a line). Outputs do not change: every node still runs
    after the nodes it reads from."""
    # In-place and concat-in-place aliases depend on the order (an input must die where it is
    # overwritten; a slice is written before its concat runs): the search sees views only, and
    # the new order gets its own alias pass when it is planned.
    views_only = (options or MemoryOptions()).replace(inplace=False, concat_inplace=False)
    schedule = memory_schedule(graph, views_only)
    found = reorder(schedule, time_limit=time_limit, seed=seed)
    nodes = tuple(graph.nodes[i] for i in found.order)
    return dataclasses.replace(graph, nodes=nodes), found


def _buffer_name(buffer_id: str, kind: str) -> str:
    return buffer_id[: -len("::ws")] if kind == "workspace" else buffer_id


def workspace_bytes(graph: Graph, node: Node, *, prepared_weights: bool = True) -> int:
    """Scratch bytes the node's kernel asks for (0 without a kernel or a workspace function),
    with weights transformed or read as stored (`MemoryOptions.prepared_weights`)."""
    kernel = kernel_of(node)
    if kernel is None or kernel.workspace is None:
        return 0
    metas_in, metas_out = node_metas(graph, node)
    extra = weights_kwargs(kernel, prepared_weights)
    try:
        size = int(kernel.workspace(metas_in, metas_out, **node.attributes, **extra))
    except Exception as e:  # a workspace function failing is a kernel bug: say where
        raise ModelError(f"node {node.name!r} ({node.op_type}): its kernel's workspace function failed: {e}") from None
    if size < 0:
        raise ModelError(f"node {node.name!r} ({node.op_type}): its kernel asked for {size} bytes of workspace")
    return size


def node_metas(graph: Graph, node: Node) -> tuple[list[TensorMeta | None], list[TensorMeta | None]]:
    """The shapes and dtypes of a node's inputs and outputs (None for an omitted one), as
    kernels' workspace and prepare functions take them."""
    return [None if not n else _meta(graph, n) for n in node.inputs], [
        None if not n else _meta(graph, n) for n in node.outputs
    ]


def _meta(graph: Graph, name: str) -> TensorMeta:
    t = graph.tensor(name)
    return TensorMeta(t.shape, t.dtype)


def view_source(graph: Graph, node: Node, outside: set[str]) -> str | None:
    """The input whose bytes the node's output 0 shares, or None when it must be a copy."""
    kernel = kernel_of(node)
    if kernel is None or not kernel.view or not node.inputs or not node.outputs or not node.outputs[0]:
        return None
    if node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
        return None  # training_mode given: the output may differ from the input
    source, out = node.inputs[0], node.outputs[0]
    if not source or source in outside or out in outside:
        return None
    if graph.tensors[source].nbytes != graph.tensors[out].nbytes:
        return None
    return source
