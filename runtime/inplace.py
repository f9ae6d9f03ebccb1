"""In-place and concat-in-place aliasing, and the check that no alias makes a kernel read overwritten data.

Three forms of alias let tensors share bytes (the planner then places each alias group at
one offset, with a height that follows its live members step by step, see `planner.aliases`):

1. views (Reshape, Flatten, ...): output 0 is its input's bytes (`runtime.problem.view_source`);
2. in place: an op whose kernel declares ``inplace=(k, ...)`` writes output 0 over input k
   when that input dies at this step (this node is its last reader), has the output's
   shape and dtype, is not a graph output, not a constant and not outside the arena, and
   no other tensor sharing those bytes is still needed. Output 0 may also start at input
   0's first byte with another size: for a plane-wise kernel (pooling, a depthwise Conv;
   no larger than the input, as many planes) and for a kernel that declares its own route
   over its input (`Planes.over`: a dense 1x1 or KxK 'same' Conv and its ConvAct, pixel-wise
   or row-lagged, `runtime.kernels.conv.over`; the output may be larger), and for a
   narrowing kernel (`Kernel.narrowing`: QuantizeLinear's int8 over its float32 input, same
   shape, element i written once elements 0..i are read). An alias of another size is taken
   only where it raises no peak of live bytes (`LiveBytes.try_join`). A graph input inside
   the arena may be overwritten (the caller's data was copied in, or written into the arena
   view to be written again before each run); one outside it (``io="external"``, where a
   caller's array is bound zero-copy) never is;
3. concat in place: a Concat along its outermost non-unit axis has contiguous slices, so
   each input's producer can write straight into its slice of the output (DenseNet's dense
   blocks then stop copying). An input qualifies when it is produced by a node, lives in
   the arena, is no graph output, has no alias yet, appears once in the Concat and its
   slice starts at a multiple of the alignment. The Concat then copies only the inputs
   that are not already in place (nothing at all when every input is).

`alias_hazards` is the independent check the runtime runs before executing: for every step
it finds the bytes the step writes and names any other tensor in those bytes that is still
needed (read later, a graph output, or read by this step at an input its kernel may not
overwrite).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from planner import Problem
from planner.aliases import alias_roots, profile
from runtime.graph import Graph, Node
from runtime.kernels import Kernel, kernel_of


class AliasGroups:
    """Alias links (tensor -> (aliased tensor, byte offset)) with each root's members at hand."""

    def __init__(self, links: Mapping[str, tuple[str, int]], sizes: Mapping[str, int]) -> None:
        self.links = dict(links)
        self.sizes = sizes
        self.members: dict[str, dict[str, int]] = {}
        for name in sizes:
            root, delta = self.root(name)
            self.members.setdefault(root, {})[name] = delta

    def root(self, name: str) -> tuple[str, int]:
        delta = 0
        while name in self.links:
            name, offset = self.links[name]
            delta += offset
        return name, delta

    def pieces(self, root: str, ranges: Mapping[str, tuple[int, int]]) -> list[tuple[int, int, int]]:
        """(first, last, height) of the bytes the group of `root` occupies, step by step, as
        the planner sees it (its profile, `planner.aliases.profile`)."""
        members = [(m, d) for m, d in self.members.get(root, {root: 0}).items() if m in ranges]
        return profile([(ranges[m][0], ranges[m][1], d + self.sizes[m]) for m, d in members])

    def join(self, name: str, target: str, offset: int) -> None:
        """Make `name` (a root) sit `offset` bytes into `target`; its members move with it."""
        root, delta = self.root(target)
        self.links[name] = (target, offset)
        moved = self.members.pop(name, {name: 0})
        group = self.members.setdefault(root, {})
        for member, d in moved.items():
            group[member] = delta + offset + d


def concat_slices(graph: Graph, node: Node) -> list[int] | None:
    """Byte offset of each input's slice in the Concat's output, or None when slices are not
    contiguous (some axis before the concat axis is longer than 1)."""
    out = graph.tensors[node.outputs[0]]
    rank = len(out.shape)
    axis = int(node.attributes.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or math.prod(out.shape[:axis]) != 1:
        return None
    row = math.prod(out.shape[axis + 1 :]) * out.dtype.itemsize
    offsets, at = [], 0
    for name in node.inputs:
        offsets.append(at)
        at += (graph.tensors[name].shape[axis] if name else 0) * row
    return offsets


class LiveBytes:
    """Bytes live at each step, every alias group by its profile: the planner's live curve."""

    def __init__(self, groups: AliasGroups, ranges: Mapping[str, tuple[int, int]], steps: int) -> None:
        self.groups, self.ranges = groups, ranges
        self.live = np.zeros(max(steps, 1), dtype=np.int64)
        for root in groups.members:
            if root in ranges:
                for first, last, height in groups.pieces(root, ranges):
                    self.live[first : last + 1] += height

    def try_join(
        self, name: str, target: str, offset: int, safe: Callable[[str], bool], *, force: bool = False
    ) -> bool:
        """Alias `name` into `target` unless that raises the peak of live bytes or `safe(root)`
        says the merged group has a hazard (`force`: whatever it does); say whether it did."""
        groups = self.groups
        live = self.live.copy()
        spans = [piece for n in (name, target) for piece in groups.pieces(groups.root(n)[0], self.ranges)]
        for first, last, height in spans:
            live[first : last + 1] -= height
        root = groups.root(target)[0]
        saved = {r: dict(groups.members[r]) for r in (root, name) if r in groups.members}
        groups.join(name, target, offset)
        merged = groups.pieces(root, self.ranges)
        for first, last, height in merged:
            live[first : last + 1] += height
        # Judged over the merged block's own steps: bytes it adds there must stay under the
        # peak it already had, so an alias far from the model's peak is not waved through.
        lo, hi = min(f for f, _, _ in spans + merged), max(end for _, end, _ in spans + merged)
        if not force and (live[lo : hi + 1].max() > self.live[lo : hi + 1].max() or not safe(root)):
            del groups.links[name]
            groups.members.update(saved)
            return False
        self.live = live
        return True


def plan_concat_in_place(
    graph: Graph, groups: AliasGroups, outside: set[str], alignment: int, ranges: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[str, int]]:
    """Alias Concat inputs into their slices of the output; returns the links added.

    A slice alias makes the output's block live from the input's first step, which can cost
    more than the copy it saves (an input born at a model's peak, say): an alias that would
    raise the peak of live bytes is not taken, nor one that puts a tensor still needed under
    a later write into the group (an in-place op over the Concat's output, say).
    """
    added: dict[str, tuple[str, int]] = {}
    outputs = set(graph.outputs)
    pinned = outputs | set(graph.constants)
    profile = LiveBytes(groups, ranges, len(graph.nodes))
    producer = {n: step for step, node in enumerate(graph.nodes) for n in node.outputs if n}

    def safe(root: str) -> bool:
        members = groups.members[root]
        where = {n: groups.root(n) for n in ranges if n not in outside}
        steps = sorted({producer[m] for m in members if m in producer})
        return not any(_node_hazards(graph, s, where, groups.members, groups.sizes, ranges, pinned) for s in steps)

    for node in graph.nodes:
        kernel = kernel_of(node)
        if kernel is None or node.op_type != "Concat" or not node.outputs or not node.outputs[0]:
            continue
        out = node.outputs[0]
        offsets = concat_slices(graph, node) if out not in outside else None
        if offsets is None:
            continue
        counts: dict[str, int] = {}
        for name in node.inputs:
            counts[name] = counts.get(name, 0) + 1
        for name, offset in zip(node.inputs, offsets, strict=True):
            t = graph.tensors.get(name) if name else None
            if t is None or t.producer is None or name in outside or name in outputs or counts[name] > 1:
                continue
            if name in groups.links or t.nbytes == 0 or offset % alignment or groups.root(out)[0] == name:
                continue
            if profile.try_join(name, out, offset, safe):
                added[name] = (out, offset)
    return added


def plan_in_place(
    graph: Graph,
    groups: AliasGroups,
    ranges: Mapping[str, tuple[int, int]],
    outside: set[str],
    *,
    narrowing: bool = True,
) -> dict[str, tuple[str, int]]:
    """Alias output 0 of in-place-safe ops onto an input that dies at that step (or, for a
    plane-wise kernel such as a pooling, a smaller output onto input 0's first bytes: the
    group's height drops to the output's once the input is dead; for a dense 1x1 or 'same'
    Conv, an output of any size there; with `narrowing`, a narrower output over its input,
    `Kernel.narrowing`); returns the links added."""
    added: dict[str, tuple[str, int]] = {}
    pinned = set(graph.outputs) | set(graph.constants)
    live: LiveBytes | None = None  # made at the first smaller output, then kept in step with every join
    for step, node in enumerate(graph.nodes):
        kernel = kernel_of(node)
        if kernel is None or not node.outputs or not node.outputs[0]:
            continue
        candidates = _in_place_inputs(graph, node, kernel)
        out = node.outputs[0]
        if not candidates or out in outside or out in groups.links or out not in ranges:
            continue
        for k in candidates:
            source = node.inputs[k] if k < len(node.inputs) else ""
            if not source or source in outside or source in pinned or ranges.get(source, (0, -1))[1] != step:
                continue
            if not _fits_over(graph, node, kernel, k, source, out) or graph.tensors[out].nbytes == 0:
                continue
            if not narrowing and _narrows(graph, kernel, source, out):
                continue
            root, delta = groups.root(source)
            written = (delta, delta + graph.tensors[out].nbytes)
            members = groups.members.get(root, {source: delta})
            sizes = {m: graph.tensors[m].nbytes for m in members}
            if _clobbered(graph, node, kernel, step, source, written, members, sizes, ranges, pinned):
                continue
            if _same_type(graph, source, out):
                if live is None:
                    groups.join(out, source, 0)
                else:
                    live.try_join(out, source, 0, lambda _: True, force=True)
            else:
                # A smaller output over its input: the group holds the input's height while
                # the input lives, the output's after; taken only where that raises no peak.
                # One live curve for the whole pass (a tiled model has thousands of such nodes).
                live = live or LiveBytes(groups, ranges, len(graph.nodes))
                if not live.try_join(out, source, 0, lambda _: True):
                    continue
            added[out] = (source, 0)
            break
    return added


def _narrows(graph: Graph, kernel: Kernel, source: str, out: str) -> bool:
    """Whether `out` over `source` is a narrowing kernel's output over a wider input."""
    return kernel.narrowing and graph.tensors[out].dtype.itemsize < graph.tensors[source].dtype.itemsize


def narrowing_links(graph: Graph, links: Mapping[str, tuple[str, int]]) -> list[str]:
    """The outputs `links` puts over a wider input of their narrowing kernel (`Kernel.narrowing`)."""
    found = []
    for out, (source, _) in links.items():
        t = graph.tensors.get(out)
        node = graph.node(t.producer) if t is not None and t.producer else None
        kernel = kernel_of(node) if node is not None else None
        if kernel is not None and source in graph.tensors and _narrows(graph, kernel, source, out):
            found.append(out)
    return found


def _same_type(graph: Graph, a: str, b: str) -> bool:
    ta, tb = graph.tensors[a], graph.tensors[b]
    return ta.shape == tb.shape and ta.dtype == tb.dtype


def _plane_wise(graph: Graph, node: Node, kernel: Kernel) -> bool:
    """Whether this node's kernel computes each output plane from the same input plane only."""
    spec = kernel.planes
    if spec is None or not node.outputs or not node.outputs[0] or any(node.outputs[1:]):
        return False
    inputs = [graph.tensors.get(n) if n else None for n in node.inputs]
    return bool(spec.applies(dict(node.attributes), inputs, graph.tensors[node.outputs[0]]))


def _writes_over(graph: Graph, node: Node, kernel: Kernel) -> bool:
    """Whether this node's kernel declares a route of its own with output 0 from input 0's
    first byte, of any size (`Planes.over`: a dense 1x1 or 'same' KxK Conv)."""
    spec = kernel.planes
    if spec is None or spec.over is None or not node.outputs or not node.outputs[0] or any(node.outputs[1:]):
        return False
    inputs = [graph.tensors.get(n) if n else None for n in node.inputs]
    return spec.overlaps(dict(node.attributes), inputs, graph.tensors[node.outputs[0]])


def _in_place_inputs(graph: Graph, node: Node, kernel: Kernel) -> tuple[int, ...]:
    """The inputs output 0 may be planned over."""
    if 0 not in kernel.inplace and (_plane_wise(graph, node, kernel) or _writes_over(graph, node, kernel)):
        return (*kernel.inplace, 0)
    return kernel.inplace


def _fits_over(graph: Graph, node: Node, kernel: Kernel, k: int, source: str, out: str) -> bool:
    """Can output 0 be written over input `k`: same shape and dtype, a plane-wise kernel's
    output no larger than input 0, with as many planes and no other output in use, the
    output of a kernel with its own route over input 0 (any size, the same dtype), or a
    narrowing kernel's over input 0 (same shape, no more bytes per element)."""
    if kernel.planes is not None and any(node.outputs[1:]):
        return False  # its other outputs (MaxPool's indices) are not plane-wise
    if _same_type(graph, source, out) and k in kernel.inplace:
        return True
    if k == 0 and _writes_over(graph, node, kernel):
        return graph.tensors[source].dtype == graph.tensors[out].dtype
    if k == 0 and k in kernel.inplace and kernel.narrowing:
        src, dst = graph.tensors[source], graph.tensors[out]
        return src.shape == dst.shape and dst.dtype.itemsize <= src.dtype.itemsize
    if k != 0 or not _plane_wise(graph, node, kernel):
        return False
    src, dst = graph.tensors[source], graph.tensors[out]
    same_planes = len(src.shape) == len(dst.shape) >= 2 and src.shape[:2] == dst.shape[:2]
    return same_planes and src.dtype == dst.dtype and dst.nbytes <= src.nbytes


def _clobbered(
    graph: Graph,
    node: Node,
    kernel: Kernel,
    step: int,
    writer: str,
    written: tuple[int, int],
    members: Mapping[str, int],
    sizes: Mapping[str, int],
    ranges: Mapping[str, tuple[int, int]],
    pinned: set[str],
) -> list[tuple[str, str]]:
    """(tensor, why) for every member of the group that writing bytes `written` at `step`
    would destroy while it is still needed. `writer` is the tensor the write belongs to (or,
    when planning, the input about to be overwritten: the same bytes)."""
    lo, hi = written
    found = []
    for member, delta in members.items():
        if member == writer or sizes[member] == 0 or member not in ranges:
            continue
        first, last = ranges[member]
        if not first <= step <= last or delta >= hi or delta + sizes[member] <= lo:
            continue
        if member in pinned:
            found.append((member, "is a graph output or a constant, needed after the run"))
        elif last > step:
            found.append((member, f"is still read at step {last}"))
        elif not _overwritable(graph, node, kernel, member, (delta, delta + sizes[member]), written):
            found.append((member, f"is read by this node at an input its {node.op_type} kernel may not overwrite"))
    return found


def _overwritable(
    graph: Graph, node: Node, kernel: Kernel, member: str, held: tuple[int, int], written: tuple[int, int]
) -> bool:
    """Whether output 0 of `node`, written at bytes `written`, may overwrite `member` (at
    bytes `held`), which dies at this step: exactly over it with the same type, or from
    its first byte for a plane-wise kernel, one with its own route or a narrowing one, over input 0."""
    out = node.outputs[0] if node.outputs else ""
    reads = [k for k, name in enumerate(node.inputs) if name == member]
    if not reads:
        return True  # nobody reads it at this step: it is dead already
    if not out or not all(k in _in_place_inputs(graph, node, kernel) for k in reads):
        return False
    if held == written and _same_type(graph, member, out):
        return True
    return reads == [0] and held[0] == written[0] and _fits_over(graph, node, kernel, 0, member, out)


def alias_hazards(graph: Graph, problem: Problem) -> list[str]:
    """Every place where a step would overwrite bytes of a tensor still needed, in words.

    Empty for every problem `runtime.memory_problem` builds; a non-empty answer means an
    alias request (``alias_of``) would make a kernel read overwritten data.
    """
    bufs = problem.buffers
    members: dict[str, dict[str, int]] = {}
    where: dict[str, tuple[str, int]] = {}
    for i, (root, delta) in enumerate(alias_roots(problem)):
        members.setdefault(bufs[root].id, {})[bufs[i].id] = delta
        where[bufs[i].id] = (bufs[root].id, delta)
    if all(len(g) == 1 for g in members.values()):
        return []
    ranges = {b.id: (b.first, b.last) for b in bufs}
    sizes = {b.id: b.size for b in bufs}
    pinned = {b.id for b in bufs if b.kind == "constant"} | set(graph.outputs)
    found: list[str] = []
    for step in range(len(graph.nodes)):
        found += _node_hazards(graph, step, where, members, sizes, ranges, pinned)
    return found


def _node_hazards(
    graph: Graph,
    step: int,
    where: Mapping[str, tuple[str, int]],
    members: Mapping[str, Mapping[str, int]],
    sizes: Mapping[str, int],
    ranges: Mapping[str, tuple[int, int]],
    pinned: set[str],
) -> list[str]:
    """What the node at `step` overwrites while still needed; `where` maps every tensor in
    the arena to (alias root, byte offset), `members` each root to its group."""
    node = graph.nodes[step]
    kernel = kernel_of(node)
    if kernel is None:
        return []
    found = []
    for writer, lo, hi in _writes(graph, node, kernel, where, sizes):
        group = members[where[writer][0]]
        if len(group) == 1:
            continue
        for member, why in _clobbered(graph, node, kernel, step, writer, (lo, hi), group, sizes, ranges, pinned):
            found.append(
                f"node {node.name!r} ({node.op_type}) writes {writer!r} over the bytes of {member!r}, which {why}"
            )
    return found


def _writes(
    graph: Graph,
    node: Node,
    kernel: Kernel,
    where: Mapping[str, tuple[str, int]],
    sizes: Mapping[str, int],
) -> list[tuple[str, int, int]]:
    """(tensor, start, end) of the bytes a node writes, relative to its alias group."""
    outs = [n for n in node.outputs if n and n in where]
    if not outs:
        return []
    first = node.outputs[0]
    if kernel.view and node.inputs and first in where and where.get(node.inputs[0]) == where[first]:
        outs.remove(first)  # a view already is its input's bytes: the step writes nothing there
    if node.op_type == "Concat" and first in outs:
        offsets = concat_slices(graph, node)
        if offsets is not None:
            outs.remove(first)
            root, base = where[first]
            spans = []
            for name, offset in zip(node.inputs, offsets, strict=True):
                if name and where.get(name) != (root, base + offset):
                    size = graph.tensors[name].nbytes
                    spans.append((first, base + offset, base + offset + size))
            return spans + [(n, where[n][1], where[n][1] + sizes[n]) for n in outs]
    return [(n, where[n][1], where[n][1] + sizes[n]) for n in outs]
