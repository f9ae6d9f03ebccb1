"""Backward kernels of dense and elementwise ops, and the two losses memplan appends for training.

These are memplan's own op types (domain "memplan", not ONNX's): `runtime.training` emits them when it builds
a training step. They keep the kernel contract of `runtime.kernels`: inputs are read-only,
results go into the preallocated ``out``. Each name says which gradient it computes:
``<Op>Grad`` gives the gradient with respect to the op's (single) data input, ``<Op>GradA`` /
``<Op>GradB`` with respect to its first / second input.

Gradients that flow into a broadcast operand are summed back to that operand's shape
(`unbroadcast`): the output's shape says which axes were broadcast.
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, kernel


def unbroadcast(value: np.ndarray, out: np.ndarray, scale: float = 1.0) -> None:
    """Write into ``out`` the sum of ``value`` over the axes numpy broadcast ``out``'s shape along."""
    lead = value.ndim - out.ndim
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(out.shape) if n == 1 and value.shape[lead + i] != 1
    )
    reduced = value.sum(axis=axes, keepdims=True) if axes else value
    np.multiply(reduced.reshape(out.shape), scale, out=out)


@kernel("GradUnbroadcast", domain=MEMPLAN_DOMAIN)
def grad_unbroadcast(dy, *, out, scale=1.0):
    """d(input) of Add/Sub-like ops: dY summed to the input's shape, times `scale` (-1 for Sub's B)."""
    unbroadcast(dy, out, scale)


@kernel("MulGrad", domain=MEMPLAN_DOMAIN)
def mul_grad(dy, other, *, out):
    """d(A) of ``A * B`` is dY * B summed to A's shape (and symmetrically for B)."""
    unbroadcast(dy * other, out)


@kernel("ReshapeGrad", domain=MEMPLAN_DOMAIN, view=True)
def reshape_grad(dy, *, out):
    """Reshape/Flatten backward: the same bytes in the input's shape (aliased when planned in the arena)."""
    if not np.shares_memory(dy, out):
        out[...] = dy.reshape(out.shape)


@kernel("ReluGrad", domain=MEMPLAN_DOMAIN)
def relu_grad(y, dy, *, out):
    """From the forward output: Y > 0 exactly where X > 0."""
    np.multiply(dy, y > 0, out=out)


@kernel("ClipGrad", domain=MEMPLAN_DOMAIN)
def clip_grad(y, dy, lo=None, hi=None, *, out):
    """From the forward output: X lies strictly inside (lo, hi) exactly where Y does, so the input
    of Clip need not be kept for backward."""
    mask = np.ones(y.shape, dtype=bool)
    if lo is not None:
        mask &= y > lo
    if hi is not None:
        mask &= y < hi
    np.multiply(dy, mask, out=out)


@kernel("SigmoidGrad", domain=MEMPLAN_DOMAIN)
def sigmoid_grad(y, dy, *, out):
    np.subtract(1, y, out=out)
    out *= y
    out *= dy


@kernel("TanhGrad", domain=MEMPLAN_DOMAIN)
def tanh_grad(y, dy, *, out):
    np.multiply(y, y, out=out)
    np.subtract(1, out, out=out)
    out *= dy


def _gemm_operands(a_or_b: np.ndarray, trans: int) -> np.ndarray:
    return a_or_b.T if trans else a_or_b


@kernel("GemmGradA", domain=MEMPLAN_DOMAIN)
def gemm_grad_a(dy, b, *, out, alpha=1.0, transA=0, transB=0):
    """Y = alpha * A' B' + beta C: dA' = alpha dY B'^T, transposed back when transA."""
    bb = _gemm_operands(b, transB)
    if transA:
        np.matmul(bb, dy.T, out=out)  # (dY B'^T)^T
    else:
        np.matmul(dy, bb.T, out=out)
    if alpha != 1.0:
        out *= alpha


@kernel("GemmGradB", domain=MEMPLAN_DOMAIN)
def gemm_grad_b(a, dy, *, out, alpha=1.0, transA=0, transB=0):
    """dB' = alpha A'^T dY, transposed back when transB."""
    aa = _gemm_operands(a, transA)
    if transB:
        np.matmul(dy.T, aa, out=out)
    else:
        np.matmul(aa.T, dy, out=out)
    if alpha != 1.0:
        out *= alpha


@kernel("MatMulGradA", domain=MEMPLAN_DOMAIN)
def matmul_grad_a(dy, b, *, out):
    """Y = A @ B (both at least 2-D): dA = dY @ B^T summed over broadcast batch axes."""
    full = np.matmul(dy, np.swapaxes(b, -1, -2))
    unbroadcast(full, out) if full.shape != out.shape else np.copyto(out, full)


@kernel("MatMulGradB", domain=MEMPLAN_DOMAIN)
def matmul_grad_b(a, dy, *, out):
    full = np.matmul(np.swapaxes(a, -1, -2), dy)
    unbroadcast(full, out) if full.shape != out.shape else np.copyto(out, full)


# ---- losses -----------------------------------------------------------------------------------------


@kernel("SoftmaxCrossEntropy", domain=MEMPLAN_DOMAIN, outputs="many")
def softmax_cross_entropy(logits, labels, *, out):
    """Mean over the batch of -log softmax(logits)[label]; outputs (loss of shape [1], probabilities).

    The probabilities are kept for the backward pass (an "extra" tensor of the step)."""
    loss, prob = out
    np.subtract(logits, logits.max(axis=1, keepdims=True), out=prob)
    np.exp(prob, out=prob)
    prob /= prob.sum(axis=1, keepdims=True)
    picked = prob[np.arange(labels.shape[0]), labels]
    loss[...] = -np.log(np.maximum(picked, np.finfo(prob.dtype).tiny)).mean()


@kernel("SoftmaxCrossEntropyGrad", domain=MEMPLAN_DOMAIN)
def softmax_cross_entropy_grad(prob, labels, *, out):
    """d(mean cross-entropy)/d(logits) = (softmax - one_hot(label)) / N."""
    np.copyto(out, prob)
    out[np.arange(labels.shape[0]), labels] -= 1
    out /= labels.shape[0]


@kernel("MeanSquaredError", domain=MEMPLAN_DOMAIN)
def mean_squared_error(pred, target, *, out):
    """Mean over every element of (pred - target)^2, as a tensor of shape [1]."""
    diff = pred - target
    out[...] = np.mean(diff * diff)


@kernel("MeanSquaredErrorGrad", domain=MEMPLAN_DOMAIN)
def mean_squared_error_grad(pred, target, *, out):
    np.subtract(pred, target, out=out)
    out *= 2.0 / out.size
