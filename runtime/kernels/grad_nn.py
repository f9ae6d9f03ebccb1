"""Backward kernels of the ops real networks add to a training step (memplan's own op types, domain "memplan").

Softmax, LayerNormalization, Gelu and Erf, HardSwish and HardSigmoid, Div, Concat and
Transpose: `runtime.training.backward` emits them. Each keeps the kernel contract of
`runtime.kernels` (inputs read-only, results into ``out``). Which forward tensor each one
reads is chosen so that backward keeps as little alive as it can: Softmax's backward reads
its output, the others their input.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, kernel
from runtime.kernels._blocks import erf
from runtime.kernels.grad_dense import unbroadcast


@kernel("SoftmaxGrad", domain=MEMPLAN_DOMAIN)
def softmax_grad(y, dy, *, out, axis=-1, coerced=0):
    """dX = Y * (dY - sum(dY * Y) along the axis), from the forward output Y; `coerced` (Softmax before
    opset 13) sums over every axis from `axis` on, as that Softmax normalises them together."""
    np.multiply(dy, y, out=out)
    axes = tuple(range(axis % y.ndim, y.ndim)) if coerced else axis
    total = out.sum(axis=axes, keepdims=True)
    np.subtract(dy, total, out=out)
    out *= y


@kernel("LayerNormGrad", domain=MEMPLAN_DOMAIN, outputs="many")
def layer_norm_grad(dy, x, scale, *, out, axis=-1, epsilon=1e-5):
    """(dX, dScale, dBias) of LayerNormalization over the axes from `axis` on; the statistics are
    computed again from X (two reductions), so the forward pass keeps none."""
    dx, dscale, dbias = out
    first = axis % x.ndim
    axes = tuple(range(first, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    invstd = 1.0 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + epsilon)
    xhat = centred * invstd
    lead = tuple(range(first))
    if dbias is not None:
        unbroadcast(dy.sum(axis=lead), dbias)
    if dscale is not None:
        unbroadcast((dy * xhat).sum(axis=lead), dscale)
    if dx is not None:
        g = dy * scale
        mean_g = g.mean(axis=axes, keepdims=True)
        mean_gx = (g * xhat).mean(axis=axes, keepdims=True)
        np.subtract(g, mean_g, out=dx)
        dx -= xhat * mean_gx
        dx *= invstd


@kernel("GeluGrad", domain=MEMPLAN_DOMAIN)
def gelu_grad(x, dy, *, out, approximate="none"):
    """d(x Phi(x)) = Phi(x) + x phi(x) (exact); the tanh form's derivative for approximate="tanh"."""
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        inner = k * (x + 0.044715 * x**3)
        t = np.tanh(inner)
        grad = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
    else:
        phi = np.empty(x.shape, np.float64)
        erf(np.asarray(x, np.float64) / math.sqrt(2.0), phi)  # the forward kernel's erf
        grad = 0.5 * (1 + phi) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    np.multiply(dy, grad, out=out, casting="same_kind")


@kernel("ErfGrad", domain=MEMPLAN_DOMAIN)
def erf_grad(x, dy, *, out):
    np.multiply(dy, (2 / math.sqrt(math.pi)) * np.exp(-x * x), out=out, casting="same_kind")


@kernel("HardSwishGrad", domain=MEMPLAN_DOMAIN)
def hard_swish_grad(x, dy, *, out):
    """HardSwish(x) = x * clip(x / 6 + 1/2, 0, 1): slope 0 below -3, x / 3 + 1/2 between, 1 above 3."""
    slope = np.where(x <= -3, 0.0, np.where(x >= 3, 1.0, x / 3 + 0.5))
    np.multiply(dy, slope, out=out, casting="same_kind")


@kernel("HardSigmoidGrad", domain=MEMPLAN_DOMAIN)
def hard_sigmoid_grad(x, dy, *, out, alpha=0.2, beta=0.5):
    inside = (alpha * x + beta > 0) & (alpha * x + beta < 1)
    np.multiply(dy, inside * alpha, out=out, casting="same_kind")


@kernel("DivGradA", domain=MEMPLAN_DOMAIN)
def div_grad_a(dy, b, *, out):
    """d(A) of A / B: dY / B summed to A's shape."""
    unbroadcast(dy / b, out)


@kernel("DivGradB", domain=MEMPLAN_DOMAIN)
def div_grad_b(dy, a, b, *, out):
    """d(B) of A / B: -dY A / B^2 summed to B's shape."""
    unbroadcast(-dy * a / (b * b), out)


@kernel("ConcatGrad", domain=MEMPLAN_DOMAIN)
def concat_grad(dy, *, out, axis=0, start=0):
    """The part of dY that one input of Concat filled: `out.shape[axis]` entries from `start` on."""
    index = [slice(None)] * dy.ndim
    index[axis % dy.ndim] = slice(start, start + out.shape[axis % dy.ndim])
    np.copyto(out, dy[tuple(index)])


@kernel("TransposeGrad", domain=MEMPLAN_DOMAIN)
def transpose_grad(dy, *, out, perm=None):
    order = list(perm) if perm is not None else list(range(dy.ndim))[::-1]
    np.copyto(out, np.transpose(dy, np.argsort(order)))


@kernel("ReduceMeanGrad", domain=MEMPLAN_DOMAIN)
def reduce_mean_grad(dy, *, out, axes=(), keepdims=1):
    """dY spread evenly over the reduced axes (given sorted and non-negative)."""
    kept = dy if keepdims else np.expand_dims(dy, tuple(axes))
    count = int(np.prod([out.shape[a] for a in axes]))
    np.divide(np.broadcast_to(kept, out.shape), count, out=out)


def _window_sum(a: np.ndarray, below: int, above: int) -> np.ndarray:
    """Along channels (axis 1): out[c] = sum of a[c - below .. c + above], clipped to the channels there are."""
    channels = a.shape[1]
    padded = np.zeros((a.shape[0], channels + below + above + 1, *a.shape[2:]), dtype=np.float64)
    np.cumsum(a, axis=1, out=padded[:, below + 1 : below + 1 + channels])
    padded[:, below + 1 + channels :] = padded[:, below + channels : below + 1 + channels]
    return padded[:, below + above + 1 :] - padded[:, :channels]


@kernel("LRNGrad", domain=MEMPLAN_DOMAIN)
def lrn_grad(x, dy, *, out, size, alpha=0.0001, beta=0.75, bias=1.0):
    """LRN: Y = X s^-beta, s = bias + alpha / size * (sum of X^2 over the channel window). dX = dY s^-beta
    - (2 alpha beta / size) X * (sum over the windows holding the channel of dY X s^(-beta - 1))."""
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    xs = np.asarray(x, np.float64)
    s = bias + (alpha / size) * _window_sum(xs * xs, before, after)
    spread = _window_sum(dy * xs * s ** (-beta - 1), after, before)
    np.copyto(out, dy * s**-beta - (2 * alpha * beta / size) * xs * spread, casting="same_kind")
