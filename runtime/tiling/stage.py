"""A chain at the head of a CNN computed band by band: the graph pass behind `runtime.tiling`.

`chains(graph)` lists every prefix of the schedule that can become a tiled stage: each node
has a region function (`runtime.tiling.regions`) that accepts its attributes, writes one 4-D
map (5-D inside a channel shuffle; NCHW or NHWC: the height axis of every map follows from the
ops' layouts, `Chain.axes`) and reads maps of its own height or through a window; the stage
reads one map from before it, and exactly one map it makes is read after it (the stage's
output). Nodes may branch and join inside it (a fire module, an inception block): the stage
is a small DAG with one input map and one output map.

`tiled_graph(graph, chain, rows, method)` is the graph with that chain replaced by its bands,
computed one after the other; in each band every node of the chain runs at most once, on a
band of its rows (a node ``"<node>@<band>"`` writing a tile ``"<tensor>@<band>"``, with the
node's own kernel and its pads overridden at the borders only), and the band's new rows of the
stage's output are put in place (`runtime.tiling.rows.TileRows`, planned in place over the
partial output). Two methods:

1. ``"stripes"`` (Arm's cascading, rolling buffers): band ``i`` reads `rows` more rows of the
   stage's input, and each node computes every new row its inputs now allow, so no
   multiply-accumulate is repeated. A node whose window reaches back reads the last rows of
   earlier tiles; once a band has read a map for the last time, the rows a later band still
   needs are carried into one small tile ``"<tensor>@<band>~"`` and the rest die. Once the
   input is all read, the rows still missing (a deep stage's maps lag its input by their
   windows' reach: a dense block's twelve 3x3 convs at 1/8 of the input's height, 96 input
   rows) are drained band by band, a band of the output's rows at a time (as many as a band
   of the input gave), each node computing only the new rows that band needs, instead of all
   at once in the last band.
2. ``"patches"`` (MCUNetV2's recomputed halos, along the height): band ``i`` is rows
   ``[i * rows, (i + 1) * rows)`` of the stage's output; each tile holds every row its band
   needs, halo included, recomputed, and each band reads only its own tiles.

The result is an ordinary `Graph` of ordinary nodes, so `memory_problem`, every strategy, the
checker, the bounds, the canary and the Session run it as they run any model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass

from runtime.errors import ModelError
from runtime.graph import Graph, Node, TensorInfo
from runtime.kernels import MEMPLAN_DOMAIN
from runtime.tiling.regions import Region, attributes_of, layout_of, region_of, same_rows
from runtime.tiling.rows import OP_TYPE as ROWS

METHODS = ("stripes", "patches")
HEIGHT = 2
# Stripes: pixels a node with large weights computes per call at least (`_Builder.least_rows`). A
# row of a narrow map is a small matmul that reads the node's whole weights again: ResNet-18's 3x3
# convs (590 KB and 2.4 MB of weights) on rows of 28 and 14 pixels took 3x and 3.4x their untiled
# time a row. Nodes with smaller weights (MobileNetV2's, where tiling reaches: 221 KB at most) keep
# a row a call, and the arena its fewest rows allow.
ROW_PIXELS = 56
WEIGHT_BYTES = 256 * 1024


@dataclass(frozen=True)
class Chain:
    nodes: tuple[Node, ...]  # a prefix of the schedule
    source: str  # the one map it reads from before it
    output: str  # the one map read after it
    axes: tuple[tuple[str, int], ...] = ()  # each map's height axis, from the ops' layouts (default: NCHW's)

    def axis(self, name: str) -> int:
        return dict(self.axes).get(name, HEIGHT)

    def height(self, graph: Graph, name: str) -> int:
        """Rows of map `name` on its height axis."""
        return graph.tensors[name].shape[self.axis(name)]


def chains(graph: Graph) -> list[Chain]:
    """Every prefix of the schedule that can be tiled, shortest first. The height axis is the
    layouts' (`runtime.tiling.regions.Layout`): each axis of the stage's input is tried, and a
    prefix counts once an op of its own layout (a convolution, a pool) has fixed it."""
    last_use = {name: len(graph.nodes) for name in graph.outputs}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs:
            if name:
                last_use[name] = max(last_use.get(name, -1), i)
    found: dict[int, Chain] = {}
    for axis in range(4):
        for chain in _chains(graph, axis, last_use):
            found.setdefault(len(chain.nodes), chain)
    return [found[k] for k in sorted(found)]


def _chains(graph: Graph, axis: int, last_use: dict[str, int]) -> Iterator[Chain]:
    """The prefixes tileable with the rows of the stage's input on `axis`."""
    source: str | None = None
    axes: dict[str, int] = {}
    alive: set[str] = set()
    fixed = False  # an op of its own layout has agreed to `axis`
    for k, node in enumerate(graph.nodes):
        split = _split_inputs(graph, node)
        sources = {n for n in split if n not in axes} | ({source} if source else set())
        if len(sources) != 1:
            return
        source = next(iter(sources))
        axes.setdefault(source, axis)
        out_axis = _out_axis(graph, node, [axes[n] for n in split])
        if out_axis is None:
            return
        fixed = fixed or layout_of(node).height is not None
        axes[node.outputs[0]] = out_axis
        alive = {n for n in (*alive, node.outputs[0]) if last_use.get(n, -1) > k}
        output = next(iter(alive)) if len(alive) == 1 else None
        if fixed and output is not None and graph.tensors[output].shape[axes[output]] > 1:
            yield Chain(graph.nodes[: k + 1], source, output, tuple(sorted(axes.items())))


def _split_inputs(graph: Graph, node: Node) -> list[str]:
    """The node's inputs cut into bands with its output: every input that is not a constant."""
    return list(dict.fromkeys(n for n in node.inputs if n and n not in graph.constants))


def _out_axis(graph: Graph, node: Node, in_axes: list[int]) -> int | None:
    """The height axis of the node's output when its inputs keep their rows on `in_axes`, or
    None when the node cannot be cut into bands so."""
    fn = region_of(node)
    outputs = [n for n in node.outputs if n]
    if fn is None or len(outputs) != 1 or outputs[0] != node.outputs[0] or not in_axes or len(set(in_axes)) != 1:
        return None
    out = graph.tensors[outputs[0]].shape
    split = _split_inputs(graph, node)
    shape, axis, layout = graph.tensors[split[0]].shape, in_axes[0], layout_of(node)
    if not (4 <= len(out) <= 5 and 4 <= len(shape) <= 5) or (layout.height is not None and axis != layout.height):
        return None  # maps of 4 axes (5 inside a channel shuffle); a window's region takes 4 only
    moves = layout.moves(graph, node) if layout.moves is not None else tuple(range(len(shape)))
    if moves is None or len(moves) != len(shape) or not 0 <= moves[axis] < len(out):
        return None  # a reshape that merges or splits the rows' axis
    out_axis = moves[axis]
    if fn is same_rows:
        rank = len(out)
        if any(len(graph.tensors[n].shape) != rank or graph.tensors[n].shape[axis] != out[out_axis] for n in split):
            return None
        for name in node.inputs:  # a constant must not vary along the rows
            if name in graph.constants:
                dims = (1,) * (rank - len(graph.tensors[name].shape)) + graph.tensors[name].shape
                if len(dims) != rank or dims[out_axis] != 1:
                    return None
    elif len(split) != 1:
        return None
    return out_axis if fn(attributes_of(graph, node, axis), shape, out, 0, 1) is not None else None


@dataclass
class _Builder:
    graph: Graph
    chain: Chain
    method: str
    nodes: list[Node] = dataclasses.field(default_factory=list)
    infos: dict[str, TensorInfo] = dataclasses.field(default_factory=dict)
    tiles: dict[str, list[tuple[int, int, str]]] = dataclasses.field(default_factory=dict)  # (first, end, name)
    placed: str | None = None  # the stage's output as placed so far

    def tile(self, name: str, rows: tuple[int, int], label: str, columns: tuple[int, int] = (0, 0)) -> str:
        base, axis = self.graph.tensors[name], self.chain.axis(name)
        dims = list(base.shape)
        dims[axis] = rows[1] - rows[0]
        dims[-1] += sum(columns)
        shape = tuple(dims)
        nbytes = math.prod(shape) * base.dtype.itemsize
        if label in self.graph.tensors or label in self.infos:
            raise ModelError(f"tiling: tensor name {label!r} is taken; rename it to tile this model")
        self.infos[label] = TensorInfo(label, shape, base.dtype, nbytes, "activation", None, (), base.quant)
        return label

    def read(self, name: str, rows: tuple[int, int], band: int, reader: str, columns: tuple[int, int]) -> str:
        """The name of a tensor holding exactly `rows` of map `name` (between `columns` zero
        columns): a tile, or a window gathered."""
        held = self.tiles.get(name) or [(0, self.chain.height(self.graph, name), name)]
        exact = [t for t in held if (t[0], t[1]) == rows]
        if exact and columns == (0, 0):
            return exact[-1][2]
        sources = [t for t in held if t[0] < rows[1] and t[1] > rows[0]]
        window = self.tile(name, rows, f"{name}@{band}>{reader}", columns)
        attributes = {"starts": [t[0] for t in sources], "first": rows[0], **self.along(name)}
        if columns != (0, 0):
            attributes["columns"] = list(columns)
        self.emit(f"rows:{window}", [t[2] for t in sources], window, attributes)
        return window

    def along(self, name: str) -> dict[str, int]:
        """TileRows' `axis` attribute for map `name`, when its rows are not on NCHW's axis."""
        axis = self.chain.axis(name)
        return {} if axis == HEIGHT else {"axis": axis}

    def region(self, node: Node, first: int, end: int) -> Region:
        """The node's region for output rows [first, end)."""
        split = _split_inputs(self.graph, node)
        fn = region_of(node)
        assert fn is not None
        attrs = attributes_of(self.graph, node, self.chain.axis(split[0]))
        found = fn(attrs, self.graph.tensors[split[0]].shape, self.graph.tensors[node.outputs[0]].shape, first, end)
        assert found is not None  # accepted by _out_axis
        return found

    def emit(self, name: str, inputs: list[str], output: str, attributes: dict, like: Node | None = None) -> None:
        op, domain = (like.op_type, like.domain) if like is not None else (ROWS, MEMPLAN_DOMAIN)
        opset = like.opset if like is not None else self.graph.opset
        self.nodes.append(Node(name, op, tuple(inputs), (output,), attributes, opset, domain))

    def ranges(self, rows: tuple[int, int], done: dict[str, int]) -> dict[str, tuple[tuple[int, int], Region]]:
        """Per node of the chain, the rows of its output it computes for a band of the stage's
        output (and the region it reads); `done` holds the rows each map has so far (stripes)."""
        graph, need, made = self.graph, {self.chain.output: rows}, {}
        for node in reversed(self.chain.nodes):
            out = node.outputs[0]
            if out not in need:
                continue
            first, end = need[out]
            if self.method == "stripes":
                first = max(first, done.get(out, 0))
            if first >= end:
                continue
            split = _split_inputs(graph, node)
            found = self.region(node, first, end)
            made[node.name] = ((first, end), found)
            for name in split:
                a, b = need.get(name, (found.a, found.b))
                need[name] = (min(a, found.a), max(b, found.b))
        for node in self.chain.nodes:
            if node.name in made:
                done[node.outputs[0]] = made[node.name][0][1]
        return made

    def pushed(self, available: int, done: dict[str, int]) -> dict[str, tuple[tuple[int, int], Region]]:
        """Stripes: per node, the new rows of its output computable once the stage's input has
        its first `available` rows, each node taking every row its inputs allow so far."""
        graph, made = self.graph, {}
        have = {self.chain.source: available}
        for node in self.chain.nodes:
            out = node.outputs[0]
            split = _split_inputs(graph, node)
            first = done.get(out, 0)
            end = min(self.reachable(node, name, have.get(name, 0)) for name in split)
            if end > first and (end - first >= self.least_rows(node) or end == self.chain.height(graph, out)):
                made[node.name] = ((first, end), self.region(node, first, end))
                done[out] = end
            have[out] = done.get(out, 0)
        return made

    def least_rows(self, node: Node) -> int:
        """Stripes: the fewest new rows of its output `node` computes at a time (its last ones
        aside): one, or for a node with `WEIGHT_BYTES` of weights or more, enough for `ROW_PIXELS`
        pixels, so that a narrow map is not computed a row per reading of the weights."""
        out = node.outputs[0]
        shape, axis = self.graph.tensors[out].shape, self.chain.axis(out)
        weights = sum(self.graph.tensors[n].nbytes for n in node.inputs if n in self.graph.constants)
        if axis + 1 >= len(shape) or weights < WEIGHT_BYTES:
            return 1
        return min(self.chain.height(self.graph, out), -(-ROW_PIXELS // max(1, shape[axis + 1])))

    def reachable(self, node: Node, name: str, rows: int) -> int:
        """How many rows of the node's output can be computed from the first `rows` rows of input `name`."""
        if rows >= self.chain.height(self.graph, name):
            return self.chain.height(self.graph, node.outputs[0])
        lo, hi = 0, self.chain.height(self.graph, node.outputs[0])  # the answer is in [lo, hi]: binary search
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.region(node, mid - 1, mid).b <= rows:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def band(self, index: int, made: dict[str, tuple[tuple[int, int], Region]], later: dict[str, int]) -> None:
        """Every node of the chain on its rows of band `index`; with stripes, each map's rows a
        later band still reads (from row `later[map]`) are carried over as soon as this band
        has read them for the last time, and the rest of its tiles die there."""
        graph = self.graph
        last_reader = {
            n: node.name for node in self.chain.nodes if node.name in made for n in _split_inputs(graph, node)
        }
        for node in self.chain.nodes:
            if node.name not in made:
                continue
            (first, end), found = made[node.name]
            inputs = [
                self.read(n, (found.a, found.b), index, node.name, found.columns)
                if n and n not in graph.constants
                else n
                for n in node.inputs
            ]
            out = node.outputs[0]
            label = self.tile(out, (first, end), f"{out}@{index}")
            self.emit(f"{node.name}@{index}", inputs, label, {**node.attributes, **found.overrides}, node)
            self.tiles.setdefault(out, []).append((first, end, label))
            for name in _split_inputs(graph, node):
                if self.method == "stripes" and last_reader[name] == node.name and name in self.tiles:
                    self.carry(name, later.get(name), index)

    def carry(self, name: str, keep_from: int | None, index: int) -> None:
        """Keep only rows from `keep_from` of map `name` (none when no later band reads it)."""
        held = [t for t in self.tiles[name] if keep_from is not None and t[1] > keep_from]
        if not held or held[0][0] >= keep_from:  # type: ignore[operator]
            self.tiles[name] = held
            return
        assert keep_from is not None
        rows = (keep_from, held[-1][1])
        kept = self.tile(name, rows, f"{name}@{index}~")
        attributes = {"starts": [t[0] for t in held], "first": rows[0], **self.along(name)}
        self.emit(f"rows:{kept}", [t[2] for t in held], kept, attributes)
        self.tiles[name] = [(rows[0], rows[1], kept)]

    def place(self, index: int, last: bool) -> None:
        """The band's tile of the stage's output written into its rows of the whole output."""
        out = self.chain.output
        first, end, tile = self.tiles[out][-1]
        previous = self.placed
        target = out if last else f"{out}@placed{index}"
        self.placed = target
        if not last:
            info = self.graph.tensors[out]
            self.infos[target] = TensorInfo(
                target, info.shape, info.dtype, info.nbytes, "activation", None, (), info.quant
            )
        sources, starts = ([previous, tile], [0, first]) if previous else ([tile], [first])
        self.emit(f"place:{target}", sources, target, {"starts": starts, "first": 0, **self.along(out)})


def bands(height: int, rows: int) -> Iterator[tuple[int, int]]:
    for first in range(0, height, rows):
        yield first, min(first + rows, height)


def tiled_graph(graph: Graph, chain: Chain, rows: int, method: str) -> Graph:
    """`graph` with `chain` computed in bands of `rows` rows of its output (see the module docstring)."""
    if method not in METHODS:
        raise ModelError(f"tiling method {method!r}: accepted values are {METHODS}")
    height = chain.height(graph, chain.output)
    split = chain.height(graph, chain.source) if method == "stripes" else height
    if not 1 <= rows <= split:
        what = "input" if method == "stripes" else "output"
        raise ModelError(f"tiling: {rows} rows per band; the stage's {what} has {split} rows")
    builder = _Builder(graph, chain, method)
    plans = _plans(builder, rows)
    producer = next(n.name for n in chain.nodes if n.outputs[0] == chain.output)
    last = max(i for i, made in enumerate(plans) if producer in made)
    later = _first_rows_read(graph, chain, plans)
    for index, made in enumerate(plans):
        builder.band(index, made, later[index])
        if producer in made:
            builder.place(index, index == last)
    return _assemble(graph, chain, builder)


def band_count(graph: Graph, chain: Chain, rows: int, method: str) -> int:
    """How many bands `tiled_graph` cuts the stage into."""
    if method != "stripes":
        return -(-chain.height(graph, chain.output) // rows)
    return len(_plans(_Builder(graph, chain, method), rows))


def _plans(builder: _Builder, rows: int) -> list[dict[str, tuple[tuple[int, int], Region]]]:
    """Per band, what each node computes (see the module docstring)."""
    graph, chain = builder.graph, builder.chain
    done: dict[str, int] = {}
    height = chain.height(graph, chain.output)
    if builder.method != "stripes":
        spans = list(bands(height, rows))
        return [builder.ranges((a, height) if i == len(spans) - 1 else (a, b), done) for i, (a, b) in enumerate(spans)]
    split = chain.height(graph, chain.source)  # the stage's input read in bands of `rows` rows
    plans = [builder.pushed(first + rows, done) for first in range(0, split - rows, rows)]
    step = -(-rows * height // split)  # then the output's missing rows drained, as many a band
    plans += [builder.ranges((a, min(a + step, height)), done) for a in range(done.get(chain.output, 0), height, step)]
    plans.append(builder.pushed(split, done))  # any row no band of the output needed
    return [made for made in plans if made]


def _first_rows_read(
    graph: Graph, chain: Chain, plans: list[dict[str, tuple[tuple[int, int], Region]]]
) -> list[dict[str, int]]:
    """For each band, the first row of each map that any later band reads."""
    inputs = {node.name: _split_inputs(graph, node) for node in chain.nodes}
    found: list[dict[str, int]] = [{} for _ in plans]
    first: dict[str, int] = {}
    for index in range(len(plans) - 1, -1, -1):
        found[index] = dict(first)
        for name, (_, region) in plans[index].items():
            for tensor in inputs[name]:
                first[tensor] = min(first.get(tensor, region.a), region.a)
    return found


def _assemble(graph: Graph, chain: Chain, builder: _Builder) -> Graph:
    nodes = (*builder.nodes, *graph.nodes[len(chain.nodes) :])
    dropped = {n.outputs[0] for n in chain.nodes} - {chain.output}
    infos = {name: t for name, t in graph.tensors.items() if name not in dropped} | builder.infos
    return rewired(graph, nodes, infos)


def rewired(graph: Graph, nodes: tuple[Node, ...], infos: dict[str, TensorInfo], **changes: object) -> Graph:
    """`graph` with `nodes` in its place and the tensors `infos`, each tensor's producer and consumers
    worked out again from those nodes (a constant keeps its own); `changes` replace other fields."""
    producer = {out: n.name for n in nodes for out in n.outputs if out}
    consumers: dict[str, list[str]] = {}
    for n in nodes:
        for name in dict.fromkeys(n.inputs):
            if name:
                consumers.setdefault(name, []).append(n.name)
    tensors = {
        name: dataclasses.replace(
            t, producer=producer.get(name, t.producer if t.kind == "constant" else None),
            consumers=tuple(consumers.get(name, ())),
        )
        for name, t in infos.items()
    }  # fmt: skip
    return dataclasses.replace(graph, nodes=nodes, tensors=tensors, **changes)  # type: ignore[arg-type]
