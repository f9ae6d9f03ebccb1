"""From a forward ONNX model to one training step as a runtime `Graph`: forward, loss, backward, update.

`build_training_step(model, trainable, loss=..., optimizer=...)` returns a `TrainingStep`
whose graph is an ordinary runtime Graph: its nodes are the forward ops as they are
(BatchNormalization becomes memplan's `BatchNormTrain`, which normalises with the batch's
statistics), the loss memplan appends, the backward ops of `runtime.training.backward` in
reverse order, and the optimizer's in-place updates. Each parameter is updated as soon as its
gradient is complete and no later backward op reads it, so gradients die early.

Tensor kinds are ONE's training categories: "activation" (non-const forward tensors),
"trainable", "backprop" (gradients of activations), "gradient" (of trainables), "optimizer"
(momenta, Adam's moments and step count), "extra" (auxiliary tensors a layer keeps for its
backward pass: batch-norm statistics, softmax probabilities); kernel scratch becomes
"disposable" when the step is planned (`runtime.training.plans`).

Trainable parameters and optimizer state are both graph inputs and graph outputs of the step,
so lifetime analysis keeps them for the whole schedule; their updated values share their bytes
(`TrainingStep.in_place`), so they stay put in the arena from one step to the next.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from runtime.errors import ModelError, UnsupportedOpError
from runtime.graph import Graph, Node, TensorInfo, load_model
from runtime.kernels import MEMPLAN_DOMAIN
from runtime.training import backward_nn  # noqa: F401 (registers the rules of real networks' ops)
from runtime.training.backward import RULES

LOSSES = ("cross_entropy", "mse")
OPTIMIZERS = ("sgd", "adam", "none")
DEFAULT_HYPER = {"sgd": {"lr": 0.05, "momentum": 0.9}, "adam": {"lr": 0.001}, "none": {}}


@dataclass
class TrainingStep:
    """One training step as a runtime graph, plus what a session needs to run it repeatedly."""

    graph: Graph
    data_inputs: tuple[str, ...]  # what the caller feeds every step: the model's inputs and the label
    label: str
    loss: str
    loss_node: str
    trainable: tuple[str, ...]
    gradients: dict[str, str]  # trainable -> its gradient tensor
    state: dict[str, np.ndarray]  # initial value of every persistent tensor (parameters, optimizer state)
    in_place: dict[str, str] = field(default_factory=dict)  # updated tensor -> the persistent tensor it overwrites
    optimizer: str = "sgd"


def backward_ops() -> list[str]:
    """Forward op types memplan can differentiate (BatchNormalization through BatchNormTrain)."""
    return sorted({*RULES, "BatchNormalization"} - {"BatchNormTrain"})


def build_training_step(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto,
    trainable: Sequence[str] | None = None,
    *,
    loss: str = "cross_entropy",
    optimizer: str = "sgd",
    dims: Mapping[str, int] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    output: str | None = None,
    label: str = "label",
    hyper: Mapping[str, float] | None = None,
    recompute: bool = True,
) -> TrainingStep:
    """The training step of `model`; `trainable` defaults to every float initializer.

    Raises ModelError naming the field at fault for: no trainable initializers, a name that is
    no float initializer, an unknown loss or optimizer, an output the loss cannot take, and
    (UnsupportedOpError) every op on the gradient path without a backward rule, all listed.
    The model itself is never modified; its inputs are bound as `runtime.load_model` binds them
    (`shapes`, whole input shapes; `dims`, symbolic dims by name). `hyper` overrides the optimizer's defaults (`DEFAULT_HYPER`);
    `recompute` lets batch normalisation's backward recompute its Conv input instead of keeping it."""
    if loss not in LOSSES:
        raise ModelError(f"loss={loss!r}: accepted values are {LOSSES}")
    if optimizer not in OPTIMIZERS:
        raise ModelError(f"optimizer={optimizer!r}: accepted values are {OPTIMIZERS}")
    # BatchNormalization trains on batch statistics: keep it apart from the Conv before it.
    graph = load_model(model, dims, shapes=shapes, fuse=False)
    names = _trainable(graph, trainable, _made_by_constant_of_shape(model))
    out = output or graph.outputs[0]
    if out not in graph.outputs:
        raise ModelError(f"output {out!r} is not a graph output; the model's outputs are {list(graph.outputs)}")
    builder = Builder(graph, names, optimizer, {**DEFAULT_HYPER[optimizer], **(hyper or {})}, recompute)
    return builder.build(out, loss, label)


def _made_by_constant_of_shape(model: str | os.PathLike[str] | bytes | onnx.ModelProto) -> set[str]:
    """Outputs of the model's ConstantOfShape nodes (weights some exporters make that way); load_model
    has folded them into constants by then, so the ONNX graph itself is read (no external data)."""
    try:
        if isinstance(model, onnx.ModelProto):
            proto = model
        elif isinstance(model, bytes | bytearray | memoryview):
            proto = onnx.load_from_string(bytes(model))
        else:
            proto = onnx.load(os.fspath(model), load_external_data=False)
    except Exception:  # not ONNX (a .tflite file): it has no ConstantOfShape
        return set()
    return {o for node in proto.graph.node if node.op_type == "ConstantOfShape" for o in node.output if o}


def _trainable(
    graph: Graph, trainable: Sequence[str] | None, made: frozenset[str] | set[str] = frozenset()
) -> tuple[str, ...]:
    """Float initializers, and weights a ConstantOfShape of the model makes (`made`: folded at load)."""
    # Batch-norm running statistics and Clip bounds are float initializers too, but no gradient moves them.
    fixed = {"BatchNormalization": slice(3, 5), "Clip": slice(1, 3)}
    running = {n for node in graph.nodes if node.op_type in fixed for n in node.inputs[fixed[node.op_type]]}
    floats = [
        n for n, c in graph.constants.items() if c.dtype.kind == "f" and _weight(c.source, n, made) and n not in running
    ]
    names = tuple(floats if trainable is None else trainable)
    if not names:
        raise ModelError("the model has no trainable initializers: give float initializers to train (none found)")
    for n in names:
        c = graph.constants.get(n)
        if c is None or not _weight(c.source, n, made):
            raise ModelError(
                f"trainable {n!r} is not an initializer the model's nodes read; float initializers: {floats}"
            )
        if c.dtype.kind != "f":
            raise ModelError(f"trainable {n!r} has dtype {c.dtype}; only float initializers can be trained")
        if n in running:
            raise ModelError(
                f"trainable {n!r} is a BatchNormalization running statistic or a Clip bound; no gradient trains it"
            )
    return names


def _weight(source: str, name: str, made: frozenset[str] | set[str]) -> bool:
    return source in ("initializer", "external") or (source == "folded" and name in made)


class Builder:
    """Accumulates the step's nodes and tensors; backward rules call `needs`, `grad_of`, `emit`."""

    def __init__(
        self, graph: Graph, trainable: tuple[str, ...], optimizer: str, hyper: dict[str, float], recompute: bool = True
    ) -> None:
        self.fwd = graph
        self.recompute = recompute
        self.producer = {o: n for n in graph.nodes for o in n.outputs if o}
        self.trainable = trainable
        self.optimizer = optimizer
        self.hyper = hyper
        self.nodes: list[Node] = []
        self.types: dict[str, tuple[tuple[int, ...], np.dtype, str]] = {}  # name -> (shape, dtype, kind)
        self.grads: dict[str, str] = {}  # tensor -> its gradient so far
        self.state: dict[str, np.ndarray] = {}
        self.in_place: dict[str, str] = {}
        self._fresh: list[tuple[str, str]] = []  # (tensor, new contribution) written by the node being emitted
        self.loss_node = ""
        self._count = 0

    # ---- what rules call --------------------------------------------------------------------------------

    def tensor(self, name: str) -> TensorInfo:
        shape, dtype, kind = self.types[name]
        return TensorInfo(name, shape, dtype, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, kind, None, ())

    def needs(self, name: str) -> bool:
        return bool(name) and name in self.requires

    def grad_of(self, name: str) -> str:
        """A new tensor for (a contribution to) the gradient of `name`; contributions are summed."""
        self._count += 1
        g = f"grad/{name}" if f"grad/{name}" not in self.types else f"grad/{name}/{self._count}"
        shape, dtype, _ = self.types[name]
        self._add(g, shape, dtype, "gradient" if name in self.trainable else "backprop")
        self._fresh.append((name, g))
        return g

    def pass_grad(self, name: str, grad: str) -> None:
        """`name`'s gradient (contribution) is the tensor `grad` itself."""
        self._accumulate(name, grad, "")

    def constant(self, name: str) -> np.ndarray | None:
        c = self.fwd.constants.get(name)
        return None if c is None or name in self.trainable else c.value()

    def recomputed(self, name: str) -> str:
        """`name` for a backward op to read: with ``recompute``, a Conv output is computed again from the
        Conv's inputs (which its own backward keeps anyway), so the forward copy dies right after its
        consumers and only the recomputed one (kind "extra") lives, for one backward op."""
        src = self.producer.get(name)
        if not self.recompute or src is None or src.op_type != "Conv":
            return name
        again = f"{name}/recomputed"
        shape, dtype, _ = self.types[name]
        self._add(again, shape, dtype, "extra")
        self.emit("Conv", src.inputs, [again], f"{src.name}/recompute", src.attributes, domain=src.domain)
        return again

    def emit(
        self,
        op: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
        at: Node | str | None,
        attrs: Any = None,
        domain: str = MEMPLAN_DOMAIN,
    ) -> None:
        """Append node `op` (memplan's own unless `domain` says otherwise) named after the forward
        node it differentiates (`at`), then sum gradient contributions."""
        base = at.name if isinstance(at, Node) else at or op
        self._count += 1
        name = f"{base}/{op}#{self._count}"
        self.nodes.append(Node(name, op, tuple(inputs), tuple(outputs), dict(attrs or {}), self.fwd.opset, domain))
        fresh, self._fresh = self._fresh, []
        for name, g in fresh:
            self._accumulate(name, g, base)

    # ---- building ---------------------------------------------------------------------------------------

    def build(self, out: str, loss: str, label: str) -> TrainingStep:
        for name, t in self.fwd.tensors.items():
            kind = "trainable" if name in self.trainable else "input" if t.kind == "input" else "activation"
            self.types[name] = (t.shape, t.dtype, kind)
        forward = [self._forward(n) for n in self.fwd.nodes]
        self.requires = self._requires_grad(forward)
        self._check_rules(forward, out)
        self.nodes.extend(forward)
        loss_name, seed = self._loss(out, loss, label)
        self._backward(forward, out, seed)
        return self._finish(label, loss_name)

    def _forward(self, node: Node) -> Node:
        """Forward nodes as they are, but batch normalisation in training mode (with saved statistics)."""
        if node.op_type != "BatchNormalization" or not any(n in self.trainable for n in node.inputs[1:3]):
            return node
        if any(node.outputs[1:]):
            raise ModelError(f"node {node.name!r}: BatchNormalization with running-statistics outputs is not supported")
        channels = self.types[node.inputs[1]][0]
        stats = (f"{node.name}/mean", f"{node.name}/invstd")
        for s in stats:
            self._add(s, channels, self.types[node.inputs[1]][1], "extra")
        attrs = {"epsilon": node.attributes.get("epsilon", 1e-5)}
        outputs = (node.outputs[0], *stats)
        return Node(node.name, "BatchNormTrain", node.inputs[:3], outputs, attrs, node.opset, MEMPLAN_DOMAIN)

    def _requires_grad(self, forward: list[Node]) -> set[str]:
        req = set(self.trainable)
        for node in forward:
            if any(n in req for n in node.inputs if n):
                req.update(n for n in node.outputs if n)
        return req

    def _check_rules(self, forward: list[Node], out: str) -> None:
        if out not in self.requires:
            raise ModelError(f"output {out!r} does not depend on any trainable initializer {list(self.trainable)}")
        missing: dict[str, list[str]] = {}
        for node in forward:
            if any(n in self.requires for n in node.outputs) and node.op_type not in RULES:
                missing.setdefault(node.op_type, []).append(node.name)
        if missing:
            listed = "; ".join(f"{op} ({', '.join(map(repr, ns[:5]))})" for op, ns in sorted(missing.items()))
            raise UnsupportedOpError(
                f"no backward kernel for: {listed}; memplan differentiates {backward_ops()}", missing
            )

    def _loss(self, out: str, loss: str, label: str) -> tuple[str, str]:
        shape, dtype, _ = self.types[out]
        if label in self.types:
            raise ModelError(f"label={label!r} is already a tensor of the model; choose another name")
        seed = f"grad/{out}"
        model_out = out
        if loss == "cross_entropy" and len(shape) > 2 and all(d == 1 for d in shape[2:]):
            # Logits as (N, C, 1, 1), as classifiers ending in a 1x1 Conv export them: the loss reads them flat.
            out = f"{model_out}/flat"
            self._add(out, shape[:2], dtype, "activation")
            self.emit("Flatten", [model_out], [out], "loss", {"axis": 1}, domain="")
            shape, seed = shape[:2], f"grad/{out}"
        if loss == "cross_entropy":
            if len(shape) != 2:
                raise ModelError(f"cross_entropy needs a 2-D output (batch, classes); {out!r} has shape {list(shape)}")
            self._add(label, shape[:1], np.dtype(np.int64), "input")
            self._add("loss", (1,), dtype, "output")
            self._add("loss/probabilities", shape, dtype, "extra")
            self.emit("SoftmaxCrossEntropy", [out, label], ["loss", "loss/probabilities"], "loss")
            self.loss_node = self.nodes[-1].name
            self._add(seed, shape, dtype, "backprop")
            self.emit("SoftmaxCrossEntropyGrad", ["loss/probabilities", label], [seed], "loss")
        else:
            self._add(label, shape, dtype, "input")
            self._add("loss", (1,), dtype, "output")
            self.emit("MeanSquaredError", [out, label], ["loss"], "loss")
            self.loss_node = self.nodes[-1].name
            self._add(seed, shape, dtype, "backprop")
            self.emit("MeanSquaredErrorGrad", [out, label], [seed], "loss")
        if out != model_out:
            full = f"grad/{model_out}"
            self._add(full, self.types[model_out][0], dtype, "backprop")
            self.emit("ReshapeGrad", [seed], [full], "loss")
            seed = full
        self.grads[model_out] = seed
        return "loss", seed

    def _backward(self, forward: list[Node], out: str, seed: str) -> None:
        readers = {w: sum(w in n.inputs for n in forward) for w in self.trainable}
        if self.optimizer == "adam":
            self._add("adam/t", (1,), np.dtype(np.float32), "optimizer")
            self.state["adam/t"] = np.zeros(1, np.float32)
        counted = False
        for node in reversed(forward):
            dy = self.grads.get(node.outputs[0]) if node.outputs else None
            if dy is not None and any(self.needs(n) for n in node.inputs):
                RULES[node.op_type](self, node, dy)
            for w in dict.fromkeys(n for n in node.inputs if n in readers):
                readers[w] -= 1
                if readers[w] == 0:
                    if self.optimizer == "adam" and not counted:
                        self._add("adam/t/next", (1,), np.dtype(np.float32), "optimizer")
                        self.emit("AdamStepCount", ["adam/t"], ["adam/t/next"], "update")
                        self.in_place["adam/t/next"] = "adam/t"
                        counted = True
                    self._update(w)

    def _update(self, w: str) -> None:
        g = self.grads.get(w)
        if g is None:
            raise ModelError(f"trainable {w!r} does not affect the loss: it gets no gradient")
        shape, dtype, _ = self.types[w]
        if self.optimizer == "none":
            return
        names = ["m", "s"] if self.optimizer == "adam" else ["v"]
        for s in names:
            self._add(f"{w}/{s}", shape, dtype, "optimizer")
            self._add(f"{w}/{s}/next", shape, dtype, "optimizer")
            self.state[f"{w}/{s}"] = np.zeros(shape, dtype)
            self.in_place[f"{w}/{s}/next"] = f"{w}/{s}"
        self._add(f"{w}/next", shape, dtype, "trainable")
        self.in_place[f"{w}/next"] = w
        outs = [f"{w}/next", *(f"{w}/{s}/next" for s in names)]
        if self.optimizer == "adam":
            self.emit("AdamUpdate", [w, g, f"{w}/m", f"{w}/s", "adam/t/next"], outs, f"update/{w}", self.hyper)
        else:
            self.emit("SgdMomentumUpdate", [w, g, f"{w}/v"], outs, f"update/{w}", self.hyper)

    def _accumulate(self, name: str, g: str, base: str) -> None:
        old = self.grads.get(name)
        if old is None:
            self.grads[name] = g
            return
        shape, dtype, _ = self.types[name]
        total = f"grad/{name}/sum{self._count}"
        self._add(total, shape, dtype, "gradient" if name in self.trainable else "backprop")
        self.grads[name] = total
        self.emit("Add", [old, g], [total], base or None, domain="")

    def _add(self, name: str, shape: tuple[int, ...], dtype: np.dtype, kind: str) -> None:
        self.types[name] = (tuple(int(d) for d in shape), np.dtype(dtype), kind)

    def _finish(self, label: str, loss: str) -> TrainingStep:
        fwd = self.fwd
        for w in self.trainable:
            self.state[w] = np.array(fwd.constants[w].value(), copy=True)
        persistent = [n for n in self.state]
        updated = list(self.in_place)
        lost = [w for w in self.trainable if w not in self.grads]
        if lost:
            raise ModelError(f"trainable {lost} do(es) not affect the loss: no gradient reaches them")
        grads = {w: self.grads[w] for w in self.trainable}
        extra_out = list(grads.values()) if self.optimizer == "none" else []
        data = (*fwd.inputs, label)
        inputs = (*data, *persistent)
        outputs = tuple(dict.fromkeys((loss, *persistent, *updated, *extra_out)))
        tensors = self._tensor_infos(set(fwd.constants) - set(self.trainable))
        constants = {n: c for n, c in fwd.constants.items() if n not in self.trainable and n in tensors}
        tensors = {n: t for n, t in tensors.items() if n not in fwd.constants or n in constants or n in self.state}
        graph = Graph(
            f"{fwd.name}/train",
            tuple(self.nodes),
            tensors,
            inputs,
            outputs,
            constants,
            fwd.opset,
            dict(fwd.dims),
            fwd.max_tensor_bytes,
            fwd.model_dir,
            fwd.folded,
        )
        return TrainingStep(
            graph,
            data,
            label,
            loss,
            self.loss_node,
            self.trainable,
            grads,
            self.state,
            dict(self.in_place),
            self.optimizer,
        )

    def _tensor_infos(self, constants: set[str]) -> dict[str, TensorInfo]:
        producer: dict[str, str] = {}
        consumers: dict[str, list[str]] = {}
        for node in self.nodes:
            for n in node.outputs:
                if n:
                    producer[n] = node.name
            for n in dict.fromkeys(node.inputs):
                if n:
                    consumers.setdefault(n, []).append(node.name)
        out = {}
        for name, (shape, dtype, kind) in self.types.items():
            if name not in producer and name not in consumers:
                continue
            kind = "constant" if name in constants else kind
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            out[name] = TensorInfo(name, shape, dtype, nbytes, kind, producer.get(name), tuple(consumers.get(name, ())))
        return out
