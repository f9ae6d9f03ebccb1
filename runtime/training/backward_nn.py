"""Backward rules of the ops real networks bring: attention, normalisation, modern activations, joins.

Registered in `runtime.training.backward.RULES` like the basic ones (importing this module
registers them); each emits `runtime.kernels.grad_nn`'s kernels or the basic ones.
"""

from __future__ import annotations

from runtime.errors import ModelError
from runtime.graph import Node
from runtime.training.backward import StepBuilder, rule


@rule("Softmax")
def _softmax(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        legacy = node.opset < 13  # normalises every axis from `axis` on together, default 1
        attrs = {"axis": node.attributes.get("axis", 1 if legacy else -1), "coerced": int(legacy)}
        b.emit("SoftmaxGrad", [node.outputs[0], dy], [b.grad_of(node.inputs[0])], node, attrs)


@rule("Dropout")
def _dropout(b: StepBuilder, node: Node, dy: str) -> None:
    """Dropout as exported for inference is the identity (its mask all true, as the forward kernel runs
    it): its gradient is dY itself."""
    training = node.inputs[2] if len(node.inputs) > 2 else ""
    value = b.constant(training) if training else None
    if training and (value is None or bool(value)):
        raise ModelError(
            f"node {node.name!r}: Dropout in training mode has no backward; "
            "export the model for inference (Dropout is then the identity)"
        )
    if b.needs(node.inputs[0]):
        b.pass_grad(node.inputs[0], dy)


@rule("LRN")
def _lrn(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        attrs = {k: node.attributes[k] for k in ("size", "alpha", "beta", "bias") if k in node.attributes}
        b.emit("LRNGrad", [node.inputs[0], dy], [b.grad_of(node.inputs[0])], node, attrs)


@rule("LayerNormalization")
def _layer_norm(b: StepBuilder, node: Node, dy: str) -> None:
    if any(node.outputs[1:]):
        raise ModelError(f"node {node.name!r}: LayerNormalization with Mean/InvStdDev outputs has no backward")
    x, scale = node.inputs[:2]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    outs = [b.grad_of(t) if b.needs(t) else "" for t in (x, scale, bias)]
    if any(outs):
        attrs = {k: node.attributes[k] for k in ("axis", "epsilon") if k in node.attributes}
        b.emit("LayerNormGrad", [dy, x, scale], outs, node, attrs)


@rule("Gelu")
def _gelu(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        attrs = {"approximate": node.attributes.get("approximate", "none")}
        b.emit("GeluGrad", [node.inputs[0], dy], [b.grad_of(node.inputs[0])], node, attrs)


@rule("Erf", "HardSwish")
def _from_input(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        b.emit(f"{node.op_type}Grad", [node.inputs[0], dy], [b.grad_of(node.inputs[0])], node)


@rule("HardSigmoid")
def _hard_sigmoid(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        attrs = {k: node.attributes[k] for k in ("alpha", "beta") if k in node.attributes}
        b.emit("HardSigmoidGrad", [node.inputs[0], dy], [b.grad_of(node.inputs[0])], node, attrs)


@rule("Div")
def _div(b: StepBuilder, node: Node, dy: str) -> None:
    a, c = node.inputs[:2]
    if b.needs(a):
        b.emit("DivGradA", [dy, c], [b.grad_of(a)], node)
    if b.needs(c):
        b.emit("DivGradB", [dy, a, c], [b.grad_of(c)], node)


@rule("Sum")
def _sum(b: StepBuilder, node: Node, dy: str) -> None:
    for x in dict.fromkeys(node.inputs):
        if not b.needs(x):
            continue
        times = node.inputs.count(x)
        if times == 1 and b.tensor(x).shape == b.tensor(dy).shape:
            b.pass_grad(x, dy)
        else:
            b.emit("GradUnbroadcast", [dy], [b.grad_of(x)], node, {"scale": float(times)})


@rule("Concat")
def _concat(b: StepBuilder, node: Node, dy: str) -> None:
    axis = int(node.attributes["axis"])
    start = 0
    for x in node.inputs:
        if b.needs(x):
            b.emit("ConcatGrad", [dy], [b.grad_of(x)], node, {"axis": axis, "start": start})
        start += b.tensor(x).shape[axis]


@rule("Transpose")
def _transpose(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        perm = node.attributes.get("perm")
        attrs = {"perm": list(perm)} if perm is not None else {}
        b.emit("TransposeGrad", [dy], [b.grad_of(node.inputs[0])], node, attrs)


@rule("ReduceMean")
def _reduce_mean(b: StepBuilder, node: Node, dy: str) -> None:
    x = node.inputs[0]
    if not b.needs(x):
        return
    rank = len(b.tensor(x).shape)
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = b.constant(node.inputs[1])
        if axes is None:
            raise ModelError(f"node {node.name!r}: ReduceMean's axes must be a constant to differentiate it")
        axes = [int(a) for a in axes.reshape(-1)]
    else:
        axes = list(node.attributes.get("axes", []))
    if not axes and node.attributes.get("noop_with_empty_axes", 0):
        b.pass_grad(x, dy)
        return
    axes = sorted(a % rank for a in axes) if axes else list(range(rank))
    attrs = {"axes": axes, "keepdims": int(node.attributes.get("keepdims", 1))}
    b.emit("ReduceMeanGrad", [dy], [b.grad_of(x)], node, attrs)
