"""Backward kernels of 2-D convolution, pooling and batch normalisation (memplan's own op types, domain "memplan").

`runtime.training` emits them. Convolution gradients loop over the kernel's taps only
(kh * kw iterations); each tap is one grouped contraction over batch and output pixels,
so depthwise convolutions need no loop over channels. The padded input gradient they
accumulate into is the kernel's declared workspace (a "disposable" tensor of the step).

Attributes are the forward op's, with the same ONNX defaults; `runtime.training` copies
them from the forward node (and writes explicit ``pads``, so ``auto_pad`` is never seen here).
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, kernel
from runtime.kernels.window import padded_extent, window_geometry


def _geometry(x_shape, y_shape, kernel_shape, strides, pads, dilations):
    """Per spatial axis: kernel size, stride, dilation, leading pad, padded extent to cover every window."""
    geo = window_geometry(x_shape, y_shape, kernel_shape, "NOTSET", pads, strides, dilations)
    return geo.kernel, geo.strides, geo.dilations, geo.begin, padded_extent(x_shape[2:], geo)


def _tap(i, j, stride, dilation, oh, ow):
    """The padded-input slice that kernel tap (i, j) reads for every output pixel."""
    (sh, sw), (dh, dw) = stride, dilation
    return (..., slice(i * dh, i * dh + (oh - 1) * sh + 1, sh), slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))


def _padded(x, pad, extent, fill):
    n_c = x.shape[:-2]
    xp = np.full((*n_c, *extent), fill, dtype=x.dtype)
    xp[..., pad[0] : pad[0] + x.shape[-2], pad[1] : pad[1] + x.shape[-1]] = x
    return xp


def _padded_grad(x_meta_shape, dtype, extent, ws):
    n_c = x_meta_shape[:-2]
    size = int(np.prod((*n_c, *extent))) * np.dtype(dtype).itemsize
    if ws is not None and ws.nbytes >= size:
        buf = ws[:size].view(dtype).reshape(*n_c, *extent)
        buf[...] = 0
        return buf
    return np.zeros((*n_c, *extent), dtype=dtype)


def _crop(dxp, pad, out):
    out[...] = dxp[..., pad[0] : pad[0] + out.shape[-2], pad[1] : pad[1] + out.shape[-1]]


def _padded_grad_bytes(dy_index):
    """Workspace of a gradient into the input of a conv/pool: the padded input gradient. Needs an
    explicit ``kernel_shape`` (runtime.training always writes one)."""

    def size(inputs, outputs, **attrs):
        out, dy = outputs[0], inputs[dy_index]
        geometry = _geometry(
            out.shape, dy.shape, attrs["kernel_shape"], attrs.get("strides"), attrs.get("pads"), attrs.get("dilations")
        )
        return int(np.prod((*out.shape[:-2], *geometry[4]))) * out.dtype.itemsize

    return size


# ---- convolution ----------------------------------------------------------------------------------------


def _grouped(a, group):
    """(N, C, H, W) as (N, group, C / group, H, W)."""
    return a.reshape(a.shape[0], group, a.shape[1] // group, *a.shape[2:])


@kernel("ConvGradInput", domain=MEMPLAN_DOMAIN, workspace=_padded_grad_bytes(0))
def conv_grad_input(dy, w, *, out, ws=None, kernel_shape=None, strides=None, pads=None, dilations=None, group=1):
    """dX of a 2-D Conv: every tap scatters W[tap]^T dY into the padded input gradient."""
    ks = kernel_shape or w.shape[-2:]
    ks, st, dl, pad, extent = _geometry(out.shape, dy.shape, ks, strides, pads, dilations)
    dxp = _padded_grad(out.shape, out.dtype, extent, ws)
    dyg = _grouped(dy, group)
    wg = w.reshape(group, w.shape[0] // group, *w.shape[1:])
    oh, ow = dy.shape[-2:]
    for i in range(ks[0]):
        for j in range(ks[1]):
            part = np.einsum("ngmhw,gmc->ngchw", dyg, wg[..., i, j], optimize=True)
            dxp[_tap(i, j, st, dl, oh, ow)] += part.reshape(out.shape[0], out.shape[1], oh, ow)
    _crop(dxp, pad, out)


@kernel("ConvGradWeight", domain=MEMPLAN_DOMAIN)
def conv_grad_weight(x, dy, *, out, kernel_shape=None, strides=None, pads=None, dilations=None, group=1):
    """dW of a 2-D Conv: for every tap, dY contracted with the input pixels that tap read."""
    ks = kernel_shape or out.shape[-2:]
    ks, st, dl, pad, extent = _geometry(x.shape, dy.shape, ks, strides, pads, dilations)
    xp = _padded(x, pad, extent, 0)
    dyg = _grouped(dy, group)
    og = out.reshape(group, out.shape[0] // group, *out.shape[1:])
    oh, ow = dy.shape[-2:]
    for i in range(ks[0]):
        for j in range(ks[1]):
            window = _grouped(xp[_tap(i, j, st, dl, oh, ow)], group)
            og[..., i, j] = np.einsum("ngmhw,ngchw->gmc", dyg, window, optimize=True)


@kernel("ConvGradBias", domain=MEMPLAN_DOMAIN)
def conv_grad_bias(dy, *, out):
    """dB of a Conv: dY summed over batch and pixels."""
    np.sum(dy, axis=(0, *range(2, dy.ndim)), out=out)


# ---- pooling --------------------------------------------------------------------------------------------


@kernel("MaxPoolGrad", domain=MEMPLAN_DOMAIN, workspace=_padded_grad_bytes(2))
def max_pool_grad(x, y, dy, *, out, ws=None, kernel_shape=None, strides=None, pads=None, dilations=None, ceil_mode=0):
    """dX of MaxPool: each output's gradient goes to the first input of its window equal to the max
    (the window order onnx's reference uses), so ties are not counted twice."""
    ks, st, dl, pad, extent = _geometry(x.shape, y.shape, kernel_shape, strides, pads, dilations)
    xp = _padded(x, pad, extent, -np.inf)
    dxp = _padded_grad(out.shape, out.dtype, extent, ws)
    taken = np.zeros(y.shape, dtype=bool)
    oh, ow = y.shape[-2:]
    for i in range(ks[0]):
        for j in range(ks[1]):
            tap = _tap(i, j, st, dl, oh, ow)
            hit = (xp[tap] == y) & ~taken
            dxp[tap] += dy * hit
            taken |= hit
    _crop(dxp, pad, out)


@kernel("AveragePoolGrad", domain=MEMPLAN_DOMAIN, workspace=_padded_grad_bytes(0))
def average_pool_grad(
    dy, *, out, ws=None, kernel_shape=None, strides=None, pads=None, dilations=None, ceil_mode=0, count_include_pad=0
):
    """dX of AveragePool: each output's gradient shared equally by the inputs its average counted."""
    ks, st, dl, pad, extent = _geometry(out.shape, dy.shape, kernel_shape, strides, pads, dilations)
    # Which padded positions the divisor counts: the real input, plus explicit pads when asked.
    counted = np.zeros(extent, dtype=out.dtype)
    if count_include_pad:
        p = pads or (0, 0, 0, 0)
        counted[: out.shape[-2] + p[0] + p[2], : out.shape[-1] + p[1] + p[3]] = 1
    else:
        counted[pad[0] : pad[0] + out.shape[-2], pad[1] : pad[1] + out.shape[-1]] = 1
    oh, ow = dy.shape[-2:]
    divisor = np.zeros((oh, ow), dtype=out.dtype)
    for i in range(ks[0]):
        for j in range(ks[1]):
            divisor += counted[_tap(i, j, st, dl, oh, ow)[1:]]
    share = dy / np.maximum(divisor, 1)
    dxp = _padded_grad(out.shape, out.dtype, extent, ws)
    for i in range(ks[0]):
        for j in range(ks[1]):
            tap = _tap(i, j, st, dl, oh, ow)
            dxp[tap] += share * counted[tap[1:]]
    _crop(dxp, pad, out)


@kernel("GlobalAveragePoolGrad", domain=MEMPLAN_DOMAIN)
def global_average_pool_grad(dy, *, out):
    pixels = int(np.prod(out.shape[2:]))
    np.divide(np.broadcast_to(dy, out.shape), pixels, out=out)


# ---- batch normalisation (training mode: batch statistics) -----------------------------------------------


@kernel("BatchNormTrain", domain=MEMPLAN_DOMAIN, outputs="many")
def batch_norm_train(x, scale, bias, *, out, epsilon=1e-5):
    """Y = scale * (X - mean) * invstd + bias with the batch's own statistics over (N, H, W);
    also outputs mean and invstd per channel, kept for the backward pass ("extra" tensors)."""
    y, mean, invstd = out
    axes = (0, *range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    np.mean(x, axis=axes, out=mean)
    np.subtract(x, mean.reshape(shape), out=y)
    np.mean(y * y, axis=axes, out=invstd)
    invstd += epsilon
    np.sqrt(invstd, out=invstd)
    np.divide(1, invstd, out=invstd)
    y *= (invstd * scale).reshape(shape)
    y += bias.reshape(shape)


@kernel("BatchNormGrad", domain=MEMPLAN_DOMAIN, outputs="many")
def batch_norm_grad(dy, x, scale, mean, invstd, *, out, epsilon=1e-5):
    """(dX, dScale, dBias) of BatchNormTrain; dX is the usual closed form over the batch statistics."""
    dx, dscale, dbias = out
    axes = (0, *range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    count = x.size // x.shape[1]
    xhat = (x - mean.reshape(shape)) * invstd.reshape(shape)
    sum_dy = dy.sum(axis=axes)
    sum_dy_xhat = (dy * xhat).sum(axis=axes)
    if dbias is not None:
        dbias[...] = sum_dy
    if dscale is not None:
        dscale[...] = sum_dy_xhat
    if dx is not None:
        k = (scale * invstd / count).reshape(shape)
        np.multiply(xhat, sum_dy_xhat.reshape(shape), out=dx)
        np.subtract(count * dy, dx, out=dx)
        dx -= sum_dy.reshape(shape)
        dx *= k
