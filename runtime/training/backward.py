"""Backward rules: for each forward op type, the nodes that compute its inputs' gradients.

A rule gets the forward node and the gradient of its output 0, and asks the builder for
gradient tensors of the inputs that need one (`StepBuilder.grad_of`), emitting memplan's own
backward ops (`runtime.kernels.grad_*`). Each rule reads only what its backward op needs
(Relu, Sigmoid, Tanh and Clip read their output, not their input), so lifetime analysis keeps
exactly those forward activations alive until the backward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from runtime.errors import ModelError
from runtime.graph import Node, TensorInfo
from runtime.kernels import MEMPLAN_DOMAIN


class StepBuilder(Protocol):
    """What a rule asks of the step being built (`runtime.training.build.Builder` is the one)."""

    def tensor(self, name: str) -> TensorInfo: ...

    def needs(self, name: str) -> bool:
        """Whether `name` needs a gradient (it depends on a trainable parameter)."""
        ...

    def grad_of(self, name: str) -> str:
        """A new tensor for (a contribution to) the gradient of `name`."""
        ...

    def pass_grad(self, name: str, grad: str) -> None:
        """`name`'s gradient (contribution) is the tensor `grad` itself."""
        ...

    def recomputed(self, name: str) -> str:
        """`name` for a backward op to read (perhaps computed again)."""
        ...

    def constant(self, name: str) -> Any:
        """The value of `name` when it is a constant of the model (not a trainable), else None."""
        ...

    def emit(
        self,
        op: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
        at: Node | str | None,
        attrs: Any = None,
        domain: str = MEMPLAN_DOMAIN,
    ) -> None:
        """Append node `op`, named after the forward node it differentiates (`at`)."""
        ...


Rule = Callable[[StepBuilder, Node, str], None]
RULES: dict[str, Rule] = {}


def rule(*op_types: str) -> Callable[[Rule], Rule]:
    def wrap(fn: Rule) -> Rule:
        for op in op_types:
            RULES[op] = fn
        return fn

    return wrap


def _input(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def _spatial_attrs(b: StepBuilder, node: Node, kernel_shape: tuple[int, ...], keys: tuple[str, ...]) -> dict[str, Any]:
    """Explicit geometry attributes for the 2-D backward kernels (auto_pad resolved to ``pads``)."""
    x = b.tensor(node.inputs[0])
    if len(x.shape) != 4:
        raise ModelError(f"node {node.name!r} ({node.op_type}): backward supports 2-D ({len(x.shape) - 2}-D given)")
    attrs = {k: node.attributes[k] for k in keys if k in node.attributes}
    attrs["kernel_shape"] = list(kernel_shape)
    auto_pad = node.attributes.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID"):
        raise ModelError(
            f"node {node.name!r}: backward needs auto_pad NOTSET or VALID with explicit pads, not {auto_pad}"
        )
    attrs.pop("auto_pad", None)
    return attrs


@rule("Relu", "Sigmoid", "Tanh")
def _activation(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        b.emit(f"{node.op_type}Grad", [node.outputs[0], dy], [b.grad_of(node.inputs[0])], node)


@rule("Clip")
def _clip(b: StepBuilder, node: Node, dy: str) -> None:
    if "min" in node.attributes or "max" in node.attributes:
        raise ModelError(f"node {node.name!r}: Clip with min/max attributes (opset < 11); give them as inputs")
    if b.needs(node.inputs[0]):
        b.emit("ClipGrad", [node.outputs[0], dy, _input(node, 1), _input(node, 2)], [b.grad_of(node.inputs[0])], node)


@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
def _view(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        b.emit("ReshapeGrad", [dy], [b.grad_of(node.inputs[0])], node)


@rule("Add", "Sub")
def _add(b: StepBuilder, node: Node, dy: str) -> None:
    for i, scale in ((0, 1.0), (1, -1.0 if node.op_type == "Sub" else 1.0)):
        x = node.inputs[i]
        if not b.needs(x):
            continue
        if scale == 1.0 and b.tensor(x).shape == b.tensor(dy).shape:
            b.pass_grad(x, dy)  # the gradient is dY itself: no node, no copy
        else:
            b.emit("GradUnbroadcast", [dy], [b.grad_of(x)], node, {"scale": scale})


@rule("Mul")
def _mul(b: StepBuilder, node: Node, dy: str) -> None:
    a, c = node.inputs[:2]
    if b.needs(a):
        b.emit("MulGrad", [dy, c], [b.grad_of(a)], node)
    if b.needs(c):
        b.emit("MulGrad", [dy, a], [b.grad_of(c)], node)


@rule("Gemm")
def _gemm(b: StepBuilder, node: Node, dy: str) -> None:
    attrs = {k: node.attributes[k] for k in ("alpha", "transA", "transB") if k in node.attributes}
    a, w, c = node.inputs[0], node.inputs[1], _input(node, 2)
    if b.needs(a):
        b.emit("GemmGradA", [dy, w], [b.grad_of(a)], node, attrs)
    if b.needs(w):
        b.emit("GemmGradB", [a, dy], [b.grad_of(w)], node, attrs)
    if c and b.needs(c):
        b.emit("GradUnbroadcast", [dy], [b.grad_of(c)], node, {"scale": float(node.attributes.get("beta", 1.0))})


@rule("MatMul")
def _matmul(b: StepBuilder, node: Node, dy: str) -> None:
    a, w = node.inputs[:2]
    if min(len(b.tensor(a).shape), len(b.tensor(w).shape)) < 2:
        raise ModelError(f"node {node.name!r} (MatMul): backward needs operands of at least 2 dimensions")
    if b.needs(a):
        b.emit("MatMulGradA", [dy, w], [b.grad_of(a)], node)
    if b.needs(w):
        b.emit("MatMulGradB", [a, dy], [b.grad_of(w)], node)


@rule("Conv")
def _conv(b: StepBuilder, node: Node, dy: str) -> None:
    x, w, bias = node.inputs[0], node.inputs[1], _input(node, 2)
    attrs = _spatial_attrs(b, node, b.tensor(w).shape[2:], ("strides", "pads", "dilations", "group"))
    if b.needs(w):
        b.emit("ConvGradWeight", [x, dy], [b.grad_of(w)], node, attrs)
    if bias and b.needs(bias):
        b.emit("ConvGradBias", [dy], [b.grad_of(bias)], node)
    if b.needs(x):
        b.emit("ConvGradInput", [dy, w], [b.grad_of(x)], node, attrs)


@rule("MaxPool")
def _max_pool(b: StepBuilder, node: Node, dy: str) -> None:
    if len(node.outputs) > 1 and node.outputs[1]:
        raise ModelError(f"node {node.name!r}: MaxPool with an Indices output has no backward kernel")
    keys = ("strides", "pads", "dilations", "ceil_mode")
    attrs = _spatial_attrs(b, node, tuple(node.attributes["kernel_shape"]), keys)
    if b.needs(node.inputs[0]):
        b.emit("MaxPoolGrad", [node.inputs[0], node.outputs[0], dy], [b.grad_of(node.inputs[0])], node, attrs)


@rule("AveragePool")
def _average_pool(b: StepBuilder, node: Node, dy: str) -> None:
    keys = ("strides", "pads", "dilations", "ceil_mode", "count_include_pad")
    attrs = _spatial_attrs(b, node, tuple(node.attributes["kernel_shape"]), keys)
    if b.needs(node.inputs[0]):
        b.emit("AveragePoolGrad", [dy], [b.grad_of(node.inputs[0])], node, attrs)


@rule("GlobalAveragePool")
def _global_average_pool(b: StepBuilder, node: Node, dy: str) -> None:
    if b.needs(node.inputs[0]):
        b.emit("GlobalAveragePoolGrad", [dy], [b.grad_of(node.inputs[0])], node)


@rule("BatchNormTrain")
def _batch_norm(b: StepBuilder, node: Node, dy: str) -> None:
    x, scale, bias = node.inputs[:3]
    outs = [b.grad_of(t) if b.needs(t) else "" for t in (x, scale, bias)]
    if any(outs):
        attrs = {"epsilon": node.attributes.get("epsilon", 1e-5)}
        saved = b.recomputed(x)
        b.emit("BatchNormGrad", [dy, saved, scale, node.outputs[1], node.outputs[2]], outs, node, attrs)
