"""Attention in blocks of query rows, so that no seq x seq matrix of scores is ever whole.

A transformer's attention computes ``Softmax(Q K^T * scale + mask) V``; at sequence S and H
heads, its scores and probabilities are H x S x S each, the largest tensors of the model at
long sequences. Each row of the output reads one row of Q and every row of K and V, so the
same result comes block by block of query rows:

1. `attentions(graph)` finds each MatMul(Q, K^T) [-> Mul/Div/Add/Sub by a tensor constant along
   the rows or holding a row per query] -> Softmax(last axis) -> MatMul(., V) whose every
   intermediate is read only by the next op, on rank-4 maps (batch, heads, rows, columns).
2. `blocked_graph(graph, rows)` replaces each by its blocks, at the step of its last MatMul:
   block ``i`` computes rows ``[r0, r1)`` of the scores straight from Q (MatMul's ``rows``
   attribute, its region hook: the kernel reads that band of Q, no copy), runs the same
   elementwise ops and Softmax on the block (a mask's rows: a constant's rows as a constant of
   their own, a map's through `runtime.tiling.rows.TileRows`), multiplies it by V, and puts its
   rows of the output in place (TileRows, planned over the partial output, as a spatial stage
   does). Only one block's scores are alive at a time; no multiply-accumulate is repeated.
3. `tile_attention(graph, options)` scores block heights (halving from S / 2, LOAD then the
   placed arena) and returns a `Tiling` only when the placed arena falls below the untiled one:
   the fewest blocks within `DEFAULT_SLACK` of the smallest arena.

The result is an ordinary `Graph`; the Session, the planner, the checker and the canary run it
as any other.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import planner
from planner.bounds import load
from runtime.constants import Constant
from runtime.errors import ModelError
from runtime.graph import Graph, Node, TensorInfo
from runtime.kernels import DEFAULT_DOMAINS, MEMPLAN_DOMAIN
from runtime.options import MemoryOptions
from runtime.problem import memory_problem
from runtime.tiling.rows import OP_TYPE as ROWS
from runtime.tiling.stage import Chain, rewired

METHOD = "attention_rows"
ROW_AXIS = 2  # of the rank-4 (batch, heads, rows, columns) maps of attention
ELEMENTWISE = ("Mul", "Div", "Add", "Sub")
MIN_ROWS = 8  # the smallest block tried: below it each block is a round of tiny calls
DEFAULT_SLACK = 0.1  # arena above the smallest traded for fewer blocks, a fraction of it
PLACED = 4  # block heights placed, lowest LOAD first


@dataclass(frozen=True)
class Attention:
    """One attention found: its nodes in order (the scores' MatMul, elementwise ops, Softmax,
    the output's MatMul), the query map and the output."""

    nodes: tuple[Node, ...]
    query: str
    output: str


def _standard(node: Node) -> bool:
    return node.domain in DEFAULT_DOMAINS


def attentions(graph: Graph) -> list[Attention]:
    """Every attention `blocked_graph` can compute in row blocks, in schedule order."""
    producer = {out: n for n in graph.nodes for out in n.outputs if out}
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for name in dict.fromkeys(n.inputs):
            readers.setdefault(name, []).append(n)
    outputs = set(graph.outputs)

    def only_reader(name: str) -> Node | None:
        found = readers.get(name, [])
        return found[0] if len(found) == 1 and name not in outputs else None

    found = []
    for softmax in graph.nodes:
        if softmax.op_type != "Softmax" or not _standard(softmax) or not _rank4(graph, softmax.outputs[0]):
            continue
        if int(softmax.attributes.get("axis", -1 if softmax.opset >= 13 else 1)) not in (-1, 3):
            continue
        chain = [softmax]
        node = producer.get(softmax.inputs[0])
        while node is not None and _standard(node) and node.op_type in ELEMENTWISE:
            if only_reader(node.outputs[0]) is not chain[0] or not _row_operands(graph, node):
                break
            chain.insert(0, node)
            node = producer.get(node.inputs[0])
        if node is None or node.op_type != "MatMul" or not _standard(node):
            continue
        if only_reader(node.outputs[0]) is not chain[0] or not (
            _rank4(graph, node.inputs[0]) and _rank4(graph, node.outputs[0])
        ):
            continue
        after = only_reader(softmax.outputs[0])
        if (
            after is None
            or after.op_type != "MatMul"
            or after.inputs[0] != softmax.outputs[0]
            or not _rank4(graph, after.outputs[0])
        ):
            continue
        rows = graph.tensors[node.outputs[0]].shape[ROW_AXIS]
        if (
            graph.tensors[node.inputs[0]].shape[ROW_AXIS] != rows
            or graph.tensors[after.outputs[0]].shape[ROW_AXIS] != rows
        ):
            continue
        found.append(Attention((node, *chain, after), node.inputs[0], after.outputs[0]))
    return found


def _rank4(graph: Graph, name: str) -> bool:
    info = graph.tensors.get(name)
    return info is not None and len(info.shape) == 4


def _row_operands(graph: Graph, node: Node) -> bool:
    """Whether an elementwise node's scores are its first input and its other input is the same
    for every query row (row dim 1), or has a row per query as a constant or a rank-4 map."""
    if len(node.inputs) != 2:
        return False
    scores = graph.tensors[node.inputs[0]].shape
    out = graph.tensors[node.outputs[0]].shape
    if scores != out or len(out) != 4:
        return False
    other = graph.tensors.get(node.inputs[1])
    if other is None or len(other.shape) > 4:
        return False
    dims = (1,) * (4 - len(other.shape)) + other.shape
    return dims[ROW_AXIS] == 1 or (
        dims[ROW_AXIS] == out[ROW_AXIS] and (node.inputs[1] in graph.constants or len(other.shape) == 4)
    )


def blocks(rows: int, height: int) -> list[tuple[int, int]]:
    return [(r0, min(r0 + height, rows)) for r0 in range(0, rows, height)]


@dataclass
class _Blocks:
    graph: Graph
    nodes: dict[str, list[Node]] = dataclasses.field(default_factory=dict)  # by the last node of each attention
    infos: dict[str, TensorInfo] = dataclasses.field(default_factory=dict)
    constants: dict[str, Constant] = dataclasses.field(default_factory=dict)

    def tensor(self, like: str, label: str, block: tuple[int, int]) -> str:
        base = self.graph.tensors[like]
        shape = base.shape[:ROW_AXIS] + (block[1] - block[0],) + base.shape[ROW_AXIS + 1 :]
        if label in self.graph.tensors or label in self.infos:
            raise ModelError(f"attention blocks: tensor name {label!r} is taken; rename it to tile this model")
        self.infos[label] = TensorInfo(
            label, shape, base.dtype, math.prod(shape) * base.dtype.itemsize, "activation", None, ()
        )
        return label

    def operand(self, name: str, rows: int, block: tuple[int, int], index: int, reader: str, out: list[Node]) -> str:
        """`name` as a block's elementwise operand: itself when the same for every row, else its
        rows of the block (a constant of its own, or gathered by TileRows)."""
        info = self.graph.tensors[name]
        dims = (1,) * (4 - len(info.shape)) + info.shape
        if dims[ROW_AXIS] == 1 or dims[ROW_AXIS] != rows:
            return name
        label = f"{name}@{index}"
        if name in self.graph.constants:
            if label not in self.constants:
                value = self.graph.constants[name].value()
                axis = value.ndim - 2
                part = value[(slice(None),) * axis + (slice(block[0], block[1]),)]
                if label in self.graph.tensors:
                    raise ModelError(f"attention blocks: tensor name {label!r} is taken; rename it to tile this model")
                self.constants[label] = Constant.of_array(label, part)
                self.infos[label] = TensorInfo(label, part.shape, part.dtype, part.nbytes, "constant", None, ())
            return label
        label = self.tensor(name, f"{label}>{reader}", block)  # one gathered per reader: maps may be shared
        out.append(
            Node(
                f"rows:{label}",
                ROWS,
                (name,),
                (label,),
                {"starts": [0], "first": block[0]},
                self.graph.opset,
                MEMPLAN_DOMAIN,
            )
        )
        return label

    def add(self, att: Attention, height: int) -> None:
        """Every block of `att`, each followed by its rows of the output put in place."""
        out: list[Node] = []
        rows = self.graph.tensors[att.output].shape[ROW_AXIS]
        spans = blocks(rows, height)
        placed: str | None = None
        for index, block in enumerate(spans):
            tile = self.block(att, rows, block, index, out)
            placed = self.place(att.output, placed, tile, block, index == len(spans) - 1, out)
        self.nodes[att.nodes[-1].name] = out

    def block(self, att: Attention, rows: int, block: tuple[int, int], index: int, out: list[Node]) -> str:
        """The nodes of one block into `out`; returns its tile of the output."""
        previous = ""
        for k, node in enumerate(att.nodes):
            label = self.tensor(node.outputs[0], f"{node.outputs[0]}@{index}", block)
            attributes = dict(node.attributes)
            if k == 0:  # the scores' rows straight from Q (MatMul's region hook)
                inputs: tuple[str, ...] = (node.inputs[0], node.inputs[1])
                attributes["rows"] = list(block)
            elif k == len(att.nodes) - 1:  # the block's probabilities by the whole of V
                inputs = (previous, node.inputs[1])
            else:
                inputs = (previous, *(self.operand(n, rows, block, index, node.name, out) for n in node.inputs[1:]))
            out.append(
                Node(f"{node.name}@{index}", node.op_type, inputs, (label,), attributes, node.opset, node.domain)
            )
            previous = label
        return previous

    def place(
        self, output: str, placed: str | None, tile: str, block: tuple[int, int], last: bool, out: list[Node]
    ) -> str:
        """The block's tile written into its rows of the output (over the partial output so far)."""
        info = self.graph.tensors[output]
        target = output if last else f"{output}@placed{block[0]}"
        if not last:
            if target in self.graph.tensors or target in self.infos:
                raise ModelError(f"attention blocks: tensor name {target!r} is taken; rename it to tile this model")
            self.infos[target] = TensorInfo(target, info.shape, info.dtype, info.nbytes, "activation", None, ())
        sources, starts = ((placed, tile), [0, block[0]]) if placed else ((tile,), [block[0]])
        attributes = {"starts": starts, "first": 0}
        out.append(Node(f"place:{target}", ROWS, sources, (target,), attributes, self.graph.opset, MEMPLAN_DOMAIN))
        return target


def blocked_graph(graph: Graph, rows: int, found: list[Attention] | None = None) -> Graph:
    """`graph` with each attention of `found` (default: `attentions(graph)`) computed in blocks
    of `rows` query rows (see the module docstring)."""
    found = attentions(graph) if found is None else found
    if rows < 1:
        raise ModelError(f"attention blocks: {rows} rows per block; give at least 1")
    builder = _Blocks(graph)
    for att in found:
        builder.add(att, rows)
    removed = {n.name for att in found for n in att.nodes}
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.name in builder.nodes:
            nodes.extend(builder.nodes[node.name])
        elif node.name not in removed:
            nodes.append(node)
    dropped = {n.outputs[0] for att in found for n in att.nodes[:-1]}
    infos = {name: t for name, t in graph.tensors.items() if name not in dropped} | builder.infos
    return rewired(graph, tuple(nodes), infos, constants={**graph.constants, **builder.constants})


def block_heights(graph: Graph, found: list[Attention]) -> list[int]:
    """Rows per block to try: S / 2, S / 4, ... down to `MIN_ROWS` (S the longest sequence)."""
    rows = max(graph.tensors[att.output].shape[ROW_AXIS] for att in found)
    heights, height = [], -(-rows // 2)
    while height >= MIN_ROWS:
        heights.append(height)
        height = -(-height // 2) if height > MIN_ROWS else 0
    return heights or ([rows // 2] if rows >= 2 else [])


@dataclass(frozen=True)
class Blocked:
    """What `tile_attention` chose: the graph, its attentions' nodes as one stage (`chain`),
    rows per block, blocks per attention, its LOAD and placed arena, and a note saying so."""

    graph: Graph
    chain: Chain
    rows: int
    tiles: int
    load: int
    arena_bytes: int
    note: str


def tile_attention(
    graph: Graph,
    options: MemoryOptions | None = None,
    *,
    strategy: str = "greedy_by_size",
    untiled: int | None = None,
    slack: float = DEFAULT_SLACK,
    time_limit: float = 60.0,
) -> Blocked | None:
    """The attention row blocks of `graph` with the smallest placed arena (the fewest blocks within
    `slack` of it), or None when no block height lowers the arena below the untiled one (or the
    graph has no attention to block). `runtime.tiling.tile_auto` reports it as a `Tiling`."""
    started = time.perf_counter()
    options = options or MemoryOptions()
    found = attentions(graph)
    if not found:
        return None
    if untiled is None:
        untiled = planner.plan(memory_problem(graph, options), strategy).arena_bytes
    scored = []
    for height in block_heights(graph, found):
        if time.perf_counter() > started + time_limit:
            break
        tiled = blocked_graph(graph, height, found)
        scored.append((load(memory_problem(tiled, options)), -height, tiled))
    placed = []
    for peak, negative, tiled in sorted(scored, key=lambda s: (s[0], s[1]))[:PLACED]:
        placed.append((planner.plan(memory_problem(tiled, options), strategy).arena_bytes, -negative, peak, tiled))
    within = [p for p in placed if p[0] < untiled]
    if not within:
        return None
    smallest = min(p[0] for p in within)
    arena, height, peak, tiled = max((p for p in within if p[0] <= smallest * (1 + slack)), key=lambda p: (p[1], -p[0]))
    nodes = tuple(n for att in found for n in att.nodes)
    tiles = max(len(blocks(tiled.tensors[att.output].shape[ROW_AXIS], height)) for att in found)
    note = (
        f"attention in blocks of {height} query rows ({len(found)} attention(s), up to {tiles} blocks each): "
        f"arena {arena:,} bytes, untiled {untiled:,}; no extra MACs"
    )
    return Blocked(tiled, Chain(nodes, found[0].query, found[-1].output), height, tiles, peak, arena, note)
