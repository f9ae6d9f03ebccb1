"""Quantized ONNX's integer convolutions and products (NCHW): QLinearConv and com.microsoft's QGemm
(QLinearMatMul has its own route table, `runtime.kernels.quantized.qlinear_matmul`; ConvInteger and
MatMulInteger live with Conv and MatMul).

QLinearConv takes a route of its table (`runtime.kernels.quantized.qlinear_routes`: compiled
depthwise and float32 BLAS gemm routes); the general route here accumulates exactly too (8-bit
products summed in float32/float64 through BLAS, then int64); QGemm with a constant B takes
`runtime.kernels.quantized.qlinear_gemm`'s route. Requantized outputs use TFLite's
fixed-point multiplier per output channel (`runtime.quant_arith`), so they may differ from
onnxruntime's float requantization by one step where the real value sits at a tie.
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes, shared_scratch
from runtime.kernels.protocol import Bound
from runtime.kernels.quantized.common import exact_matmul
from runtime.kernels.quantized.jit_requantize import channel_parameters, requantize_rows
from runtime.kernels.quantized.qlinear_gemm import qgemm_constants, qgemm_run, qgemm_workspace, takes
from runtime.kernels.quantized.qlinear_routes import QConvShape
from runtime.kernels.window import Geometry, pad_into, padded_extent, window_geometry, windows

MS = "com.microsoft"


def _zero(z) -> np.ndarray:
    return np.zeros(1, dtype=np.int64) if z is None else np.asarray(z).astype(np.int64).reshape(-1)


def _geometry(x, w, y, auto_pad, pads, strides, dilations, kernel_shape):
    return window_geometry(x.shape, y.shape, kernel_shape or w.shape[2:], auto_pad, pads, strides, dilations)


BAND_BYTES = 1 << 17  # a band's columns and accumulators: bounded whatever the layer's size


def _conv_blocks(x, w, y, auto_pad, pads, strides, dilations, kernel_shape, group):
    """The geometry, output rows per band, and workspace blocks: the padded image, a band's
    columns (float64, exact for 8-bit products) and its accumulators."""
    geo = _geometry(x, w, y, auto_pad, pads, strides, dilations, kernel_shape)
    extent = padded_extent(x.shape[2:], geo)
    depth = (x.shape[1] // group) * int(np.prod(geo.kernel))
    rest = int(np.prod(geo.out[1:]))
    per_group = y.shape[1] // group
    depthwise = depth == int(np.prod(geo.kernel)) and per_group == 1
    unit = rest * (x.shape[1] * 2 if depthwise else depth + per_group) * 8
    rows = max(1, min(geo.out[0], BAND_BYTES // max(1, unit)))
    if depthwise:
        band = [((x.shape[1], rows * rest), np.float64), ((x.shape[1], rows * rest), np.float64)]
    else:
        columns = rows * rest
        band = [((depth, columns), np.float32), ((per_group, columns), np.float64), ((per_group, columns), np.float32)]
    if not geo.padded:
        image: tuple[int, ...] = (0,)  # unpadded: the windows read the input itself
    elif len(geo.kernel) == 2:  # a band's input rows, padded
        image = (x.shape[1], (rows - 1) * geo.strides[0] + geo.extent[0], extent[1])
    else:
        image = (x.shape[1], *extent)
    return geo, rows, [(image, x.dtype), *band]


def _band_input(x: np.ndarray, geo: Geometry, r0: int, r1: int, buf: np.ndarray, fill: int):
    """The windows of output rows r0..r1 of a padded 2-D conv over `buf`, which receives the band's
    input rows (the zero point where padding falls): never a padded copy of the whole image."""
    rows_in = (r1 - r0 - 1) * geo.strides[0] + geo.extent[0]
    view = buf[:, :rows_in]
    top, left = r0 * geo.strides[0] - geo.begin[0], geo.begin[1]
    lo, hi = max(top, 0), min(top + rows_in, x.shape[1])
    view[...] = fill
    if hi > lo:
        view[:, lo - top : hi - top, left : left + x.shape[2]] = x[:, lo:hi]
    band = Geometry(geo.kernel, geo.strides, geo.dilations, (0, geo.begin[1]), (0, geo.end[1]), (r1 - r0, geo.out[1]))
    return windows(view, band)


def _workspace(inputs, outputs, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
               strides=None, **attrs) -> int:  # fmt: skip
    x, w, y = inputs[0], inputs[3], outputs[0]
    geo_attrs = {"group": group, "auto_pad": auto_pad, "pads": pads, "strides": strides, "dilations": dilations,
                 "kernel_shape": kernel_shape}  # fmt: skip
    shape = QConvShape.of(x, w, y, geo_attrs)
    geo, route = shape.route
    if route.blocks is not None:
        return route.workspace(shape, geo)
    return scratch_bytes(*_conv_blocks(x, w, y, auto_pad, pads, strides, dilations, kernel_shape, group)[2])


def weight_matrix(w: np.ndarray, w_zero: np.ndarray) -> np.ndarray:
    """(M, C/group * prod(kernel)) float32 of ``w - w_zero`` (a zero point per output channel or one)."""
    shifted = w.astype(np.float64) - (
        w_zero.reshape(-1, *([1] * (w.ndim - 1))) if w_zero.size > 1 else float(w_zero[0])
    )
    return shifted.reshape(w.shape[0], -1)


def _accumulate(x, x_zero, w, matrix, y, ws, group, geo_args, owner, finish) -> None:
    """Per image, band of output rows and group: the exact accumulators (channels, band pixels),
    handed to ``finish(image, channels, pixels, acc)``."""
    auto_pad, pads, strides, dilations, kernel_shape = geo_args
    geo, rows, blocks = _conv_blocks(x, w, y, auto_pad, pads, strides, dilations, kernel_shape, group)
    scratch = Scratch(ws, owner)
    padded, columns_all, acc_all = (scratch.take(*b) for b in blocks[:3])
    part_all = scratch.take(*blocks[3]) if len(blocks) > 3 else acc_all  # the depthwise route has no part
    fill = int(x_zero[0])
    per_group, depth_in = y.shape[1] // group, x.shape[1] // group
    depthwise = depth_in == 1 and per_group == 1
    rank, rest = len(geo.kernel), int(np.prod(geo.out[1:]))
    order = (0, *range(1 + rank, 1 + 2 * rank), *range(1, 1 + rank))
    taps = list(np.ndindex(*geo.kernel))
    banded = geo.padded and rank == 2
    for n in range(x.shape[0]):
        if geo.padded and not banded:
            pad_into(padded, x[n], geo, fill)
        whole = None if banded else windows(padded if geo.padded else x[n], geo)  # (C, *out, *kernel)
        for r0 in range(0, geo.out[0], rows):
            r1 = min(geo.out[0], r0 + rows)
            if banded:
                view, b0, b1 = _band_input(x[n], geo, r0, r1, padded, fill), 0, r1 - r0
            else:
                view, b0, b1 = whole, r0, r1
            pixels = slice(r0 * rest, r1 * rest)
            count = (r1 - r0) * rest
            if depthwise:
                acc, product = _front(acc_all, count), _front(columns_all, count)
                acc[...] = 0
                for t, tap in enumerate(taps):
                    product.reshape(x.shape[1], r1 - r0, *geo.out[1:])[...] = view[
                        (slice(None), slice(b0, b1), Ellipsis, *tap)
                    ]
                    product -= fill
                    product *= matrix[:, t : t + 1]  # float64: the depthwise route sums in float64
                    acc += product
                finish(n, slice(None), pixels, acc)
                continue
            columns, acc, part = _front(columns_all, count), _front(acc_all, count), _front(part_all, count)
            shaped = columns.reshape(depth_in, *geo.kernel, r1 - r0, *geo.out[1:])
            for g in range(group):
                shaped[...] = view[g * depth_in : (g + 1) * depth_in, b0:b1].transpose(order)
                columns -= fill
                channels = slice(g * per_group, (g + 1) * per_group)
                exact_matmul(matrix[channels], columns, acc, part)
                finish(n, channels, pixels, acc)


def _front(block: np.ndarray, columns: int) -> np.ndarray:
    """The first ``rows x columns`` elements of a 2-D block as a contiguous (rows, columns) array
    (a column slice would be strided, and BLAS would not take it)."""
    return block.reshape(-1)[: block.shape[0] * columns].reshape(block.shape[0], columns)


def qlinear_constants(values, inputs, outputs, **attrs) -> dict:
    """The chosen route's constants where every input they read is constant, else (the general
    route) the filter matrix."""
    geo, route = QConvShape.of(inputs[0], inputs[3], outputs[0], attrs).route
    if route.constants is not None:
        if all(values[i] is not None for i in range(1, len(values)) if inputs[i] is not None):
            return route.constants(QConvShape.of(inputs[0], inputs[3], outputs[0], attrs), geo, values)
        return {}
    w, w_zero = values[3], values[5]
    if w is None or w_zero is None:
        return {}
    return {"w_matrix": weight_matrix(w, _zero(w_zero))}


def _bind(inputs, outputs, attrs, general):
    """The chosen route's call, with its constants as prepared (or worked out per call), or None
    for the general route. Its steps (each loop and BLAS call with its views and arguments) are made
    once, at prepare (`prime`), for the step's arrays: a tiled stage's band calls are each a few small
    loops, where working out the views and arguments again took more than the loops."""
    shape = QConvShape.of(inputs[0], inputs[3], outputs[0], attrs)
    geo, route = shape.route
    run, steps_of = route.run, route.steps
    if run is None or route.constants is None or steps_of is None:
        return None
    make, need = route.constants, route.workspace(shape, geo)
    carved: list = [None, None]  # the workspace last given and its blocks: a node's is the same every run
    primed: list = [None, (), []]  # the table, input and output the steps were made for, and the steps

    def scratch(ws):
        # Without a workspace, the thread's shared scratch: blocks of its own, kept between runs,
        # added up over a tiled stage's hundreds of band steps beside the arena.
        space = ws if ws is not None or not need else shared_scratch(need)
        if space is None or carved[0] is not space:
            carved[:] = space, route.scratch_of(shape, geo, space)
        return carved[1]

    def prime(*values, out, ws=None, **prepared):
        if "q_table" in prepared and values[0] is not None:
            blocks = scratch(ws)
            primed[:] = (
                prepared["q_table"],
                (values[0], out, blocks),
                steps_of(shape, geo, values, out, blocks, prepared),
            )

    def call(*values, out, ws=None, **prepared):
        blocks = scratch(ws)
        table, (x, y, kept) = primed[0], primed[1] or (None, None, None)
        if table is None or prepared.get("q_table") is not table or values[0] is not x or out is not y:
            # other arrays than the primed ones (an input fed anew each run): this call's steps, not kept
            run(shape, geo, values, out, blocks, prepared if "q_table" in prepared else make(shape, geo, values))
            return
        if blocks is not kept:  # the shared scratch replaced by a larger one: the steps made again on it
            prime(*values, out=out, ws=ws, **prepared)
        for step in primed[2]:
            step()

    return Bound(call, takes_attributes=True, prime=prime)


@kernel("QLinearConv", workspace=_workspace, constants=qlinear_constants, bind=_bind)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *, out, ws,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None,
                 w_matrix=None, prepared_weights=True):  # fmt: skip
    channels_all = out.shape[1]
    w_scales = np.broadcast_to(np.asarray(w_scale, dtype=np.float64).reshape(-1), (channels_all,))
    real = float(np.asarray(x_scale).reshape(-1)[0]) * w_scales / float(np.asarray(y_scale).reshape(-1)[0])
    multiplier, shift = qa.quantize_multiplier(real)
    zero = int(np.asarray(y_zero_point).reshape(-1)[0]) if y_zero_point is not None else 0
    lo, hi = qa.dtype_range(out.dtype)
    flat = out.reshape(out.shape[0], channels_all, -1)
    bias = None if B is None else np.asarray(B, dtype=np.int64)

    b_all, m_all, s_all, fast = channel_parameters(bias, multiplier, shift, channels_all)

    def finish(n, channels, pixels, acc):
        params = (b_all[channels], m_all[channels], s_all[channels], fast)
        requantize_rows(acc, params, zero, lo, hi, flat[n, channels, pixels])

    matrix = w_matrix if w_matrix is not None else weight_matrix(w, _zero(w_zero_point))
    geo_args = (auto_pad, pads, strides, dilations, kernel_shape)
    _accumulate(x, _zero(x_zero_point), w, matrix, out, ws, group, geo_args, "QLinearConv", finish)


def _product(a, a_zero, b, b_zero) -> np.ndarray:
    """(a - a_zero) @ (b - b_zero), exact, as int64 (b's zero point may be one per column)."""
    left = a.astype(np.float64) - float(_zero(a_zero)[0])
    bz = _zero(b_zero)
    right = b.astype(np.float64) - (bz.astype(np.float64) if bz.size > 1 else float(bz[0]))
    return np.matmul(left, right).astype(np.int64)


@kernel("QGemm", domain=MS, workspace=qgemm_workspace, constants=qgemm_constants)
def qgemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None, y_zero_point=None, *, out, ws,
          alpha=1.0, transA=0, transB=0, **made):  # fmt: skip
    values = [A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point]
    if takes(values, [out], transA):  # the compiled route, its constants as prepared or made for this call
        attrs = {"alpha": alpha, "transA": transA, "transB": transB}
        qgemm_run(A, out, ws, made if "q_table" in made else qgemm_constants(values, values, [out], **attrs))
        return
    a = A.T if transA else A
    b = B.T if transB else B
    acc = _product(a, a_zero_point, b, b_zero_point)
    if C is not None:
        acc = acc + np.asarray(C, dtype=np.int64)
    scales = (
        float(alpha) * float(np.asarray(a_scale).reshape(-1)[0]) * np.asarray(b_scale, dtype=np.float64).reshape(-1)
    )
    if y_scale is None:  # a float output
        np.copyto(out, acc * (scales if scales.size > 1 else scales[0]), casting="unsafe")
        return
    multiplier, shift = qa.quantize_multiplier(scales / float(np.asarray(y_scale).reshape(-1)[0]))
    if multiplier.size == 1:
        multiplier, shift = multiplier[0], shift[0]
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = qa.requantize(acc, multiplier, shift, int(_zero(y_zero_point)[0]), lo, hi)
