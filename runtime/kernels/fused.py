"""memplan's own fused ops (domain "memplan"): made by the loader (`runtime.fuse`), never read
from a model file.

PointwiseConvAdd(X, W, B, R) = Conv(X, W, B) + R for a 1x1 convolution (stride 1, no padding,
one group), then an optional activation (attribute `activation`, as ConvAct's, fused by the
loader from the Relu after a ResNet block): the residual connection of ResNet bottlenecks and MobileNetV2 blocks. The
convolution's output is never stored whole: it is computed a band of output channels at a
time into scratch and added straight into the result, and the result may be R's own
memory (R dies at the Add in those networks). Separately, a Conv output as large as R is
live beside R at that step; fused, only a band of it is.

ConvAct(X, W, B) = act(Conv(X, W, B)) for act one of `_epilogue.ACTIVATIONS` (attribute
`activation`; Clip's bounds in `lo`/`hi`, HardSigmoid's in `alpha`/`beta`): the activation
runs over each block of the output the Conv has just written, while it is in cache, and the
Conv's output tensor is the activation's, one tensor and one pass over memory fewer.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, Bound, TensorMeta, kernel
from runtime.kernels._epilogue import NEEDS_TEMP, TEMP, Finish, activation
from runtime.kernels._scratch import block_bytes, same_start, shared_scratch, small_ufunc_buffers, units_within
from runtime.kernels.conv import jit_conv
from runtime.kernels.conv.conv import CONV_PLANES, conv_constants, conv_prepare, conv_workspace, convolve
from runtime.kernels.conv.routes import bind_conv
from runtime.kernels.same_arrays import SameArrays
from runtime.kernels.window import small_rows

# Bytes of one band of output channels (at least one channel): at 1 MiB the banded matmuls
# run as fast as one whole matmul followed by the Add (measured single-threaded on
# ResNet-50's shapes); smaller bands lose speed, larger ones only cost scratch.
BAND_BYTES = 1024 * 1024


def _band(channels: int, plane: int, itemsize: int) -> int:
    """Output channels per band: within `BAND_BYTES`, evened out over the bands, or up to 1/8
    past it when that saves a band (ResNet-50's 256 channels of 56 x 56 ran 83, 83, 83 and 7,
    whose thin last matmul cost 0.15 ms; now 86, 86 and 84)."""
    rows = units_within(BAND_BYTES, plane * itemsize, channels)
    fewer = channels // rows
    if fewer and -(-channels // fewer) * 8 <= rows * 9:
        return -(-channels // fewer)
    return -(-channels // -(-channels // rows))


def _pointwise_add_workspace(
    inputs: list[TensorMeta | None], outputs: list[TensorMeta | None], *, activation: str = "", **act: float
) -> int:
    out = outputs[0]
    assert out is not None
    if activation:
        _activation_of(activation, out.dtype, act)  # made at prepare, not during a run
    plane = int(np.prod(out.shape[2:], dtype=np.int64))
    return _band(out.shape[1], plane, out.dtype.itemsize) * plane * out.dtype.itemsize


def _activation_of(name: str, dtype: np.dtype, act: dict[str, float]):
    bounds = {k: float(v) for k, v in act.items() if k in ("lo", "hi", "alpha", "beta")}
    return activation(name, np.dtype(dtype), **bounds)


def _bind_pointwise_add(inputs, outputs, attrs: dict, general) -> Bound | None:
    """PointwiseConvAdd's call for these shapes and attributes (a session's prepare, through
    `bind`): the band, the activation's compiled code and the scratch's shape worked out once,
    each band's views once per set of arrays (`SameArrays`), the compiled route called
    straight; None (the general call) where that route does not apply."""
    out = outputs[0] if outputs else None
    if out is None or not jit_conv.takes_epilogue(out.dtype) or len(out.shape) < 3:
        return None
    name = attrs.get("activation", "")
    act = {k: v for k, v in attrs.items() if k in ("lo", "hi", "alpha", "beta")}
    spec = jit_conv.spec_of(_activation_of(name, out.dtype, act) if name else None)
    if spec is None:
        return None
    channels, plane = out.shape[1], math.prod(out.shape[2:])
    # Bands within OpenBLAS's small-matrix kernel where they hold enough rows (`window.small_rows`).
    rows = min(_band(channels, plane, out.dtype.itemsize), small_rows(channels, inputs[0].shape[1], plane))
    nbytes = rows * plane * out.dtype.itemsize

    def bands(x, w, b, r, out, ws) -> list | None:
        if ws.size < nbytes or not jit_conv.usable(out, r):
            return None
        scratch = ws[:nbytes].view(jit_conv.DTYPE).reshape(rows, plane)
        return _bands(x, w.reshape(channels, -1), b, r, out, scratch)

    made = SameArrays(bands)

    def bound(x, w, b, r, *, out, ws=None, **given):
        # Without a workspace (scratch outside the arena): the thread's shared scratch.
        todo = made(x, w, b, r, out, shared_scratch(nbytes) if ws is None else ws)
        if todo is None:
            general((x, w, b, r), out, ws, attrs)
        else:
            _run_bands(todo, spec)

    def prime(x, w, b, r, *, out, ws=None, **given):
        made(x, w, b, r, out, shared_scratch(nbytes) if ws is None else ws)

    # A session calls it without the attributes, and primes it at prepare (`runtime.step_calls`).
    return Bound(bound, prime=prime)


@kernel(
    "PointwiseConvAdd",
    domain=MEMPLAN_DOMAIN,
    workspace=_pointwise_add_workspace,
    inplace=(3,),
    prepare=jit_conv.prepare,
    bind=_bind_pointwise_add,
)
def pointwise_conv_add(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    r: np.ndarray,
    *,
    out: np.ndarray,
    ws: np.ndarray | None = None,
    activation: str = "",
    **act: float,
) -> None:
    n, channels = out.shape[0], out.shape[1]
    plane = math.prod(out.shape[2:])
    rows = _band(channels, plane, out.dtype.itemsize)
    if ws is not None:
        scratch = ws[: rows * plane * out.dtype.itemsize].view(out.dtype).reshape(rows, plane)
    else:
        scratch = np.empty((rows, plane), dtype=out.dtype)
    finish = _activation_of(activation, out.dtype, act) if activation else None
    weights = w.reshape(channels, -1)
    spec = jit_conv.spec_of(finish)
    if spec is not None and jit_conv.usable(out, r, scratch):
        _pointwise_add_compiled(x, weights, b, r, out, scratch, spec)
        return
    for i in range(n):
        source = x[i].reshape(weights.shape[1], plane)
        residual = r[i].reshape(channels, plane)
        target = out[i].reshape(channels, plane)
        for c in range(0, channels, rows):
            k = min(rows, channels - c)
            band = scratch[:k]
            np.matmul(weights[c : c + k], source, out=band)
            if b is not None:
                band += b[c : c + k, None]
            # Element by element, so `target` may be `residual`'s own memory.
            np.add(residual[c : c + k], band, out=target[c : c + k])
            if finish is not None:
                # The band's scratch is free again: the activation's temp.
                finish(target[c : c + k].reshape(-1), band.reshape(-1))


def _pointwise_add_compiled(x, weights, b, r, out, scratch, spec) -> None:
    """PointwiseConvAdd with each band's bias, residual and activation in one compiled pass
    (`jit_conv.add_bias_residual`) while the band is in cache."""
    _run_bands(_bands(x, weights, b, r, out, scratch), spec)


def _bands(x, weights, b, r, out, scratch) -> list[tuple]:
    """Each band's (weights, input, scratch, bias, has bias, residual or None when the target
    is the residual's own memory, target)."""
    channels, plane = out.shape[1], math.prod(out.shape[2:])
    rows = scratch.shape[0]
    bias = jit_conv.EMPTY if b is None else b
    made = []
    for i in range(out.shape[0]):
        source = x[i].reshape(weights.shape[1], plane)
        residual = r[i].reshape(channels, plane)
        target = out[i].reshape(channels, plane)
        in_place = same_start(residual, target)
        for c in range(0, channels, rows):
            k = min(rows, channels - c)
            part = bias if b is None else bias[c : c + k]
            apart = None if in_place else residual[c : c + k]
            made.append((weights[c : c + k], source, scratch[:k], part, b is not None, apart, target[c : c + k]))
    return made


def _run_bands(bands: list[tuple], spec) -> None:
    apart, in_place_loop = jit_conv.add_bias_residual, jit_conv.add_bias_residual_in_place
    assert apart is not None and in_place_loop is not None
    for weights, source, band, bias, has_bias, residual, target in bands:
        np.matmul(weights, source, out=band)
        if residual is None:
            in_place_loop(band, bias, has_bias, target, *spec)
        else:
            apart(band, bias, has_bias, residual, target, *spec)


@functools.lru_cache(maxsize=1024)
def _finisher(name: str, dtype: np.dtype, lo: float, hi: float, alpha: float, beta: float, out_shape: tuple[int, ...]):
    """(activation function, temp elements, temp bytes) of one ConvAct: worked out once per
    shape (at prepare, by the workspace function), as Conv's route is."""
    fn = activation(name, np.dtype(dtype), lo=float(lo), hi=float(hi), alpha=float(alpha), beta=float(beta))
    # A chunk where the formula needs a temp, else none.
    size = min(TEMP, math.prod(out_shape)) if name in NEEDS_TEMP else 0
    return fn, size, block_bytes((size,), dtype) if size else 0


def _conv_act_workspace(
    inputs, outputs, *, activation="Relu", lo=-np.inf, hi=np.inf, alpha=0.2, beta=0.5, **conv_attrs
) -> int:
    out = outputs[0]
    _, _, temp_bytes = _finisher(activation, out.dtype, lo, hi, alpha, beta, tuple(out.shape))
    return conv_workspace(inputs, outputs, **conv_attrs) + temp_bytes


def _bind_conv_act(inputs, outputs, attrs: dict, slow) -> Bound | None:
    """ConvAct's bind hook (given the plane-wise call as `slow`): the pointwise or
    compiled depthwise route with its activation's compiled code, worked out once."""
    y = outputs[0] if outputs else None
    if y is None:
        return None
    names = ("lo", "hi", "alpha", "beta")
    defaults = {"lo": -np.inf, "hi": np.inf, "alpha": 0.2, "beta": 0.5}
    bounds = [attrs.get(k, defaults[k]) for k in names]
    fn, _, _ = _finisher(attrs.get("activation", "Relu"), y.dtype, *bounds, tuple(y.shape))
    # The temp is never read: the bound call takes only compiled routes, which apply `spec`.
    return bind_conv(inputs, outputs, attrs, Finish(fn, jit_conv.EMPTY), slow)


# Planned over its input like Conv: plane-wise when depthwise, pixel-wise or row-lagged when dense.
@kernel(
    "ConvAct",
    domain=MEMPLAN_DOMAIN,
    workspace=_conv_act_workspace,
    planes=CONV_PLANES,
    prepare=conv_prepare,
    constants=conv_constants,
    bind=_bind_conv_act,
)
@small_ufunc_buffers()
def conv_act(
    x, w, b=None, *, out, ws, activation="Relu", lo=-np.inf, hi=np.inf, alpha=0.2, beta=0.5, auto_pad="NOTSET",
    dilations=None, group=1, kernel_shape=None, pads=None, strides=None, winograd_u=None, prepared_weights=True,
):  # fmt: skip
    # The temp is sized from the whole output at prepare: a plane-wise chunk of it needs no more.
    fn, size, temp_bytes = _finisher(activation, out.dtype, lo, hi, alpha, beta, out.shape)
    if ws is None:
        conv_ws, temp = None, np.empty(size, out.dtype)
    else:
        conv_ws = ws[: ws.size - temp_bytes]
        temp = ws[ws.size - temp_bytes :][: size * out.dtype.itemsize].view(out.dtype)

    finish = Finish(fn, temp)  # its activation's spec lets a compiled route apply it in its loop
    conv_attrs = {
        "auto_pad": auto_pad, "dilations": dilations, "group": group, "kernel_shape": kernel_shape, "pads": pads,
        "strides": strides,
    }  # fmt: skip
    convolve(x, w, b, out, conv_ws, finish, conv_attrs, winograd_u, prepared_weights)
