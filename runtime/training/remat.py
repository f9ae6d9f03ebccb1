"""Rematerialization of a training step: forward tensors freed after their last forward use and
computed again, by re-running the forward ops that made them, just before backward needs them.

`rematerialize(step, tensors)` is a graph pass over a built `TrainingStep` (as tiling is over an
inference graph): the forward pass is left as it is, so each chosen tensor's last reader there
ends its life; before the first backward op that reads a chosen tensor, a copy of its producer
runs on the same inputs (chosen inputs first computed again themselves, once), writing
``<tensor>/remat``, and every backward op reads that copy instead. The recomputed op is the same
kernel on the same bytes, so the loss and every gradient are bit-identical to the step without it.
Its memory problem is an ordinary one (`training_problem`), placed by any strategy.

`candidates(step)` lists what may be chosen; `step_flops` / `node_flops` count the work, so a
choice's extra FLOPs are its recomputed ops' FLOPs over the step's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np

from runtime.errors import ModelError
from runtime.graph import Graph, Node, TensorInfo
from runtime.training.build import TrainingStep

# Ops whose second run could differ from the first: never recomputed.
NON_DETERMINISTIC = frozenset(
    {"Dropout", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
SUFFIX = "/remat"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A forward tensor backward reads, that recomputation may free: its bytes and its producer's FLOPs."""

    name: str
    producer: str
    nbytes: int
    flops: int
    position: int  # its producer's index in the forward pass


def forward_length(step: TrainingStep) -> int:
    """Number of forward nodes: those before the loss node."""
    for i, node in enumerate(step.graph.nodes):
        if node.name == step.loss_node:
            return i
    raise ModelError(f"training step {step.graph.name!r} has no loss node {step.loss_node!r}")


def candidates(step: TrainingStep) -> list[Candidate]:
    """Forward tensors a later forward node reads (so their forward life can end there), made by a
    deterministic op, neither the model's output nor a graph output; in forward order, ties by name.
    Those backward reads are the ones worth freeing (`backward_reads`); the others are worth
    recomputing only on the way to one of those."""
    graph = step.graph
    fwd = forward_length(step)
    loss_input = graph.nodes[fwd].inputs[0]
    read_fwd = {n for node in graph.nodes[:fwd] for n in node.inputs if n}
    out: list[Candidate] = []
    for i, node in enumerate(graph.nodes[:fwd]):
        if node.op_type in NON_DETERMINISTIC:
            continue
        cost = node_flops(graph, node)
        for name in node.outputs:
            if name and name in read_fwd and name != loss_input and name not in graph.outputs:
                out.append(Candidate(name, node.name, graph.tensors[name].nbytes, cost, i))
    return out


def backward_reads(step: TrainingStep) -> set[str]:
    """Tensors some node after the forward pass reads."""
    return {n for node in step.graph.nodes[forward_length(step) + 1 :] for n in node.inputs if n}


def rematerialize(step: TrainingStep, tensors: Iterable[str]) -> TrainingStep:
    """`step` with every tensor of `tensors` (each one of `candidates(step)`) recomputed for backward."""
    return Rematerializer(step)(tensors)


class Rematerializer:
    """`rematerialize` for many choices over one step: what every choice shares (the forward pass, its
    producers, the candidates, who reads what) worked out once, and only the tensors whose producer or
    readers a choice changes given new infos."""

    def __init__(self, step: TrainingStep) -> None:
        self.step = step
        graph = step.graph
        self.fwd = forward_length(step)
        self.allowed = {c.name for c in candidates(step)}
        self.producer = {o: node for node in graph.nodes[: self.fwd] for o in node.outputs if o}

    def __call__(self, tensors: Iterable[str]) -> TrainingStep:
        chosen = set(tensors)
        if not chosen:
            return self.step
        unknown = sorted(chosen - self.allowed)
        if unknown:
            raise ModelError(f"cannot recompute {unknown[:5]}: candidates are forward tensors a forward node reads")
        graph, fwd, producer = self.step.graph, self.fwd, self.producer
        done: dict[str, str] = {}
        nodes = list(graph.nodes[:fwd])
        infos = dict(graph.tensors)

        def ensure(name: str) -> str:
            if name not in chosen:
                return name
            if name not in done:
                src = producer[name]
                inputs = tuple(ensure(n) if n else n for n in src.inputs)
                outputs = tuple(f"{o}{SUFFIX}" if o else o for o in src.outputs)
                for o, again in zip(src.outputs, outputs, strict=True):
                    if o:
                        infos[again] = dataclasses.replace(graph.tensors[o], name=again, kind="activation")
                        done[o] = again
                nodes.append(
                    dataclasses.replace(src, name=f"{src.name}{SUFFIX}", inputs=inputs, outputs=outputs, proto=None)
                )
            return done[name]

        for node in graph.nodes[fwd:]:
            inputs = tuple(ensure(n) if n else n for n in node.inputs)
            nodes.append(node if inputs == node.inputs else dataclasses.replace(node, inputs=inputs, proto=None))
        new_graph = dataclasses.replace(graph, nodes=tuple(nodes), tensors=_linked(nodes, infos))
        return dataclasses.replace(self.step, graph=new_graph)


def _linked(nodes: list[Node], infos: Mapping[str, TensorInfo]) -> dict[str, TensorInfo]:
    """Tensor infos with their producer and consumers as the new schedule has them (a new info only
    where they changed: most tensors of a step keep theirs)."""
    producer: dict[str, str] = {}
    consumers: dict[str, list[str]] = {}
    for node in nodes:
        for n in node.outputs:
            if n:
                producer[n] = node.name
        for n in dict.fromkeys(node.inputs):
            if n:
                consumers.setdefault(n, []).append(node.name)
    out = dict(infos)
    for name, t in infos.items():
        made, read = producer.get(name, t.producer), tuple(consumers.get(name, ()))
        if made != t.producer or read != t.consumers:
            out[name] = dataclasses.replace(t, producer=made, consumers=read)
    return out


def recomputed_nodes(step: TrainingStep) -> list[Node]:
    """The nodes `rematerialize` added to `step`."""
    return [n for n in step.graph.nodes if n.name.endswith(SUFFIX) and n.outputs and n.outputs[0].endswith(SUFFIX)]


# ---- work --------------------------------------------------------------------------------------------------


def _size(graph: Graph, name: str) -> int:
    return int(np.prod(graph.tensors[name].shape, dtype=np.int64)) if name in graph.tensors else 0


def node_flops(graph: Graph, node: Node) -> int:
    """Floating-point operations of one node: 2 per multiply-add for convolutions and matrix products
    (forward and their gradients), one per element read or written for everything else."""
    op, ins, outs = node.op_type, node.inputs, node.outputs
    y = _size(graph, outs[0]) if outs and outs[0] else 0
    if op in ("Conv", "ConvGradInput") and len(ins) > 1:
        w = graph.tensors[ins[1]].shape
        pixels = _size(graph, outs[0]) if op == "Conv" else _size(graph, ins[0])
        return 2 * pixels * int(np.prod(w[1:]))
    if op == "ConvGradWeight":
        return 2 * _size(graph, ins[1]) * int(np.prod(graph.tensors[outs[0]].shape[1:]))
    if op == "MatMul":
        return 2 * y * graph.tensors[ins[0]].shape[-1]
    if op == "Gemm":
        a = graph.tensors[ins[0]].shape
        return 2 * y * (a[0] if node.attributes.get("transA", 0) else a[1])
    if op in ("MatMulGradA", "GemmGradA"):
        grad = graph.tensors[ins[0]].shape
        rows = max(int(np.prod(grad[:-1])), 1) if op == "MatMulGradA" else grad[0]
        return 2 * int(np.prod(grad)) * (y // rows)
    if op in ("MatMulGradB", "GemmGradB"):
        lhs, grad_out = graph.tensors[ins[0]].shape, graph.tensors[ins[1]].shape
        inner = lhs[-1] if op == "MatMulGradB" else _size(graph, ins[0]) // grad_out[0]
        return 2 * _size(graph, ins[1]) * inner
    return y + sum(_size(graph, n) for n in ins if n and n not in graph.constants)


def step_flops(step: TrainingStep) -> int:
    return sum(node_flops(step.graph, n) for n in step.graph.nodes)
