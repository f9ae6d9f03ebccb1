"""Quantized ONNX's element-wise and pooling ops: com.microsoft's QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool and QLinearConcat (the ops onnxruntime's
quantizer writes).

Add and Mul use TFLite's integer arithmetic; the unary ops are 256-entry tables made as onnxruntime
makes them (dequantize, the float function, quantize rounding half to even); the pools sum exactly
and scale once. QuantizeLinear and DequantizeLinear: `runtime.kernels.quantized.quantize`.
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes, shared_scratch
from runtime.kernels.protocol import Bound
from runtime.kernels.quantized.common import merged_shapes
from runtime.kernels.quantized.jit_qlinear import BINARY, BLOCK, GLOBAL_POOL, LOOKUP, PAIRS, POOL
from runtime.kernels.quantized.quantize import one_value as _one
from runtime.kernels.window import pad_into, padded_extent, window_geometry, windows

MS = "com.microsoft"


def _binary_parameters(op: str, dtype, out_dtype, a_scale, a_zero, b_scale, b_zero, y_scale, y_zero) -> dict:
    """The compiled pass's constants: TFLite's ADD rescales each input by a table of its 256 values
    (``MultiplyByQuantizedMultiplierSmallerThanOneExp((v - z) << 20)``) and scales their sum;
    MUL scales the product of the inputs less their zero points. `q_params`: the output's
    (multiplier, shift, zero point, lo, hi) and the tables' index offset."""
    za, zb, zy = int(_one(a_zero)), int(_one(b_zero)), int(_one(y_zero))
    sa, sb, sy = _one(a_scale), _one(b_scale), _one(y_scale)
    lo, hi = qa.dtype_range(out_dtype)
    values = np.arange(*(v + i for v, i in zip(qa.dtype_range(dtype), (0, 1), strict=True)), dtype=np.int64)
    offset = -int(values[0])
    if op == "mul":
        m, s = qa.quantize_multiplier(sa * sb / sy)
        return {"q_params": np.array([m[0], s[0], zy, lo, hi, offset]), "q_zeros": np.array([za, zb]),
                "q_table_a": _NO_TABLE, "q_table_b": _NO_TABLE}  # fmt: skip
    left = 20
    twice_max = 2 * max(sa, sb)
    m1, s1 = qa.quantize_multiplier(sa / twice_max)
    m2, s2 = qa.quantize_multiplier(sb / twice_max)
    mo, so = qa.quantize_multiplier(twice_max / ((1 << left) * sy))
    return {
        "q_params": np.array([mo[0], so[0], zy, lo, hi, offset]),
        "q_zeros": np.array([za, zb]),
        "q_table_a": qa.multiply_smaller_than_one((values - za) << left, m1, s1),
        "q_table_b": qa.multiply_smaller_than_one((values - zb) << left, m2, s2),
    }


_NO_TABLE = np.zeros(0, np.int64)  # MUL's: the compiled pass adds through tables only when it has them


def _binary_constants(op: str):
    def constants(values, inputs, outputs, **_) -> dict:
        a, b = inputs[0], inputs[3]
        if any(values[i] is None for i in (1, 2, 4, 5, 6, 7) if i < len(values) and inputs[i] is not None):
            return {}
        if not _compiled_binary(a, b, outputs[0]):
            return {}
        c_zero = values[7] if len(values) > 7 else None
        scales_and_zeros = (values[1], values[2], values[4], values[5], values[6], c_zero)
        made = _binary_parameters(op, a.dtype, outputs[0].dtype, *scales_and_zeros)
        if PAIRS is not None and int(np.prod(outputs[0].shape)) >= PAIRS_FROM:
            made["q_pairs"] = _pairs_table(made, np.dtype(a.dtype), np.dtype(outputs[0].dtype))
        return made

    return constants


# Outputs from this many elements on take the table of every pair of input values (64 KB of constants,
# no more than the output itself), one lookup per element: a third of the compiled arithmetic's time.
PAIRS_FROM = 1 << 16


def _pairs_table(made: dict, dtype: np.dtype, out_dtype: np.dtype) -> np.ndarray:
    """The output of every pair of 8-bit values (a at (a - lo) * 256, b at b - lo), made by the
    compiled pass itself, so that a lookup gives exactly what that pass would."""
    lo, hi = qa.dtype_range(dtype)
    values = np.arange(lo, hi + 1)
    a = np.repeat(values, values.size).astype(dtype).reshape(1, 1, 1, -1)
    b = np.tile(values, values.size).astype(dtype).reshape(1, 1, 1, -1)
    table = np.empty(a.shape, out_dtype)
    zeros, params = made["q_zeros"], made["q_params"]
    BINARY(a, b, made["q_table_a"], made["q_table_b"], zeros, params, table, np.empty(BLOCK, np.int64))
    return table.reshape(-1)


def _compiled_binary(a, b, out) -> bool:
    eight_bit = all(np.dtype(t.dtype).itemsize == 1 and np.dtype(t.dtype).kind in "iu" for t in (a, b, out))
    return BINARY is not None and eight_bit and a.dtype == b.dtype and len(out.shape) <= 4


def _merged(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, ...]:
    """Views of the three arrays of `merged_shapes`."""
    shapes = merged_shapes(a.shape, b.shape, out.shape)
    return tuple(v.reshape(shape) for v, shape in zip((a, b, out), shapes, strict=True))


def _binary_bind(inputs, outputs, attrs, general):
    """The compiled pass bound once for the node's shapes (merged views' shapes, its scratch block),
    reading the constants as prepared; the general call where they are not, or off the compiled pass."""
    a, b, out = inputs[0], inputs[3], outputs[0]
    if not _compiled_binary(a, b, out) or not int(np.prod(out.shape)):
        return None
    shapes = merged_shapes(tuple(a.shape), tuple(b.shape), tuple(out.shape))
    carved: list = [None, None]  # the workspace last given and its block: a node's is the same every run

    def call(*values, out, ws=None, **made):
        x, y = values[0], values[3]
        if "q_params" not in made or not (x.flags.c_contiguous and y.flags.c_contiguous and out.flags.c_contiguous):
            general(values, out, ws, made)
            return
        a4, b4, out4 = x.reshape(shapes[0]), y.reshape(shapes[1]), out.reshape(shapes[2])
        if "q_pairs" in made:
            PAIRS(a4, b4, made["q_pairs"], made["q_params"][5], out4)
            return
        space = shared_scratch(BLOCK * 8) if ws is None else ws  # a block of its own per node would be kept
        if carved[0] is not space:
            carved[:] = space, Scratch(space, "QLinear binary").take((BLOCK,), np.int64)
        BINARY(a4, b4, made["q_table_a"], made["q_table_b"], made["q_zeros"], made["q_params"], out4, carved[1])

    return Bound(call, takes_attributes=True)


def _binary(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero, out, ws, op: str, made: dict) -> None:
    if "q_params" not in made:  # constants not prepared: worked out for this call
        made = _binary_parameters(op, a.dtype, out.dtype, a_scale, a_zero, b_scale, b_zero, y_scale, y_zero)
    table_a, table_b, zeros, params = made["q_table_a"], made["q_table_b"], made["q_zeros"], made["q_params"]
    if _compiled_binary(a, b, out) and all(v.flags.c_contiguous for v in (a, b, out)) and out.size:
        a4, b4, out4 = _merged(a, b, out)
        if "q_pairs" in made:
            PAIRS(a4, b4, made["q_pairs"], params[5], out4)
            return
        raw = Scratch(ws, "QLinear binary").take((BLOCK,), np.int64)
        BINARY(a4, b4, table_a, table_b, zeros, params, out4, raw)
        return
    multiplier, shift, zero, lo, hi, offset = (int(v) for v in params)
    if op == "mul":
        raw = (a.astype(np.int64) - zeros[0]) * (b.astype(np.int64) - zeros[1])
    else:
        raw = table_a[a.astype(np.int64) + offset] + table_b[b.astype(np.int64) + offset]
    out[...] = qa.requantize(raw, multiplier, shift, zero, lo, hi)


def _binary_workspace(inputs, outputs, **_) -> int:
    """A block of the compiled pass's int64 sums."""
    return scratch_bytes(((BLOCK,), np.int64)) if _compiled_binary(inputs[0], inputs[3], outputs[0]) else 0


@kernel(
    "QLinearAdd",
    domain=MS,
    inplace=(0, 3),
    constants=_binary_constants("add"),
    workspace=_binary_workspace,
    bind=_binary_bind,
)
def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out, ws, **made):
    _binary(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, out, ws, "add", made)


@kernel(
    "QLinearMul",
    domain=MS,
    inplace=(0, 3),
    constants=_binary_constants("mul"),
    workspace=_binary_workspace,
    bind=_binary_bind,
)
def qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out, ws, **made):
    _binary(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, out, ws, "mul", made)


def _table(x_dtype, x_scale, x_zero, y_scale, y_zero, out_dtype, fn) -> np.ndarray:
    """y for every x value: dequantized in float32, `fn`, quantized rounding half to even."""
    lo, hi = qa.dtype_range(x_dtype)
    values = np.arange(lo, hi + 1, dtype=np.int64)
    real = (values - int(_one(x_zero))).astype(np.float32) * np.float32(_one(x_scale))
    y = fn(real).astype(np.float32)
    out_lo, out_hi = qa.dtype_range(out_dtype)
    return np.clip(np.rint(y / np.float32(_one(y_scale))).astype(np.int64) + int(_one(y_zero)), out_lo, out_hi)


def _lookup(x, table, out) -> None:
    """out = table[x] (`table` indexed from x's dtype's least value), in one compiled pass where it can."""
    lo = np.iinfo(x.dtype).min
    table = table.astype(out.dtype, copy=False)
    if LOOKUP is not None and x.dtype.itemsize == 1 and x.flags.c_contiguous and out.flags.c_contiguous:
        LOOKUP(x.reshape(-1).view(np.uint8), table, np.uint8(-lo), out.reshape(-1))
        return
    np.take(table, x.astype(np.int64) - lo, out=out)


def _table_constants(function):
    """A constants hook making the node's table once (`q_lookup`), `function(**attributes)` being
    the float function of reals it tabulates."""

    def constants(values, inputs, outputs, **attributes) -> dict:
        if any(values[i] is None for i in range(1, len(values)) if inputs[i] is not None):
            return {}
        y_zero = values[4] if len(values) > 4 else None
        fn = function(**attributes)
        table = _table(inputs[0].dtype, values[1], values[2], values[3], y_zero, outputs[0].dtype, fn)
        return {"q_lookup": table.astype(outputs[0].dtype)}

    return constants


def _sigmoid(**_):
    return lambda r: 1 / (1 + np.exp(-r))


def _leaky_relu(alpha=0.01, **_):
    alpha32 = np.float32(alpha)
    return lambda r: np.where(r >= 0, r, r * alpha32)


@kernel("QLinearSigmoid", domain=MS, inplace=(0,), constants=_table_constants(_sigmoid))
def qlinear_sigmoid(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, out, q_lookup=None, **_):
    if q_lookup is None:
        q_lookup = _table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point, out.dtype, _sigmoid())
    _lookup(x, q_lookup, out)


def _sigmoid_mul_table(x_dtype, out_dtype, x_scale, x_zero, s_scale, s_zero, y_scale, y_zero=None) -> np.ndarray:
    """y for every x value of QLinearSigmoid (to `s_scale`, `s_zero`) then QLinearMul of x by it, both
    by their own kernels over the 256 values: the pair's integers exactly."""
    from runtime.kernels import TensorMeta, call, get_kernel

    lo, hi = qa.dtype_range(x_dtype)
    x = np.arange(lo, hi + 1).astype(x_dtype)
    s_dtype = np.asarray(s_zero).dtype
    s = _table(x_dtype, x_scale, x_zero, s_scale, s_zero, s_dtype, _sigmoid()).astype(s_dtype)
    y = np.empty(x.shape, out_dtype)
    mul = get_kernel("QLinearMul", MS)
    assert mul is not None and mul.workspace is not None
    inputs = [x, x_scale, x_zero, s, s_scale, s_zero, y_scale, y_zero]
    metas = [None if v is None else TensorMeta(np.shape(v), np.asarray(v).dtype) for v in inputs]
    ws = np.zeros(mul.workspace(metas, [TensorMeta(y.shape, y.dtype)]), np.uint8)
    call(mul, inputs, [y], ws, {}, 1)
    return y


def _sigmoid_mul_constants(values, inputs, outputs, **_) -> dict:
    if any(values[i] is None for i in range(1, len(values)) if inputs[i] is not None):
        return {}
    return {"q_lookup": _sigmoid_mul_table(inputs[0].dtype, outputs[0].dtype, *values[1:])}


@kernel("QLinearSigmoidMul", domain="memplan", inplace=(0,), constants=_sigmoid_mul_constants)
def qlinear_sigmoid_mul(x, x_scale, x_zero_point, s_scale, s_zero_point, y_scale, y_zero_point=None, *, out,
                        q_lookup=None, **_):  # fmt: skip
    """x * sigmoid(x) (SiLU, Swish) as a QDQ model quantizes it, QLinearSigmoid then QLinearMul by x
    (`runtime.fuse_qdq` joins the pair): one table of the pair's integers, so that it runs over its
    input, where the pair held x and its sigmoid at once."""
    if q_lookup is None:
        q_lookup = _sigmoid_mul_table(x.dtype, out.dtype, x_scale, x_zero_point, s_scale, s_zero_point, y_scale,
                                      y_zero_point)  # fmt: skip
    _lookup(x, q_lookup, out)


@kernel("QLinearLeakyRelu", domain=MS, inplace=(0,), constants=_table_constants(_leaky_relu))
def qlinear_leaky_relu(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, out, alpha=0.01, q_lookup=None, **_):
    if q_lookup is None:
        q_lookup = _table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point, out.dtype, _leaky_relu(alpha))
    _lookup(x, q_lookup, out)


def _concat_constants(values, inputs, outputs, **_) -> dict:
    """Each input's table into the output's scale and zero point (`q_tables`, one row per input), and
    which inputs share them (`q_same`: copied as they are), where every scale and zero point is constant."""
    scales = [values[i] for i in (0, 1, *range(3, len(values), 3), *range(4, len(values), 3))]
    metas = [outputs[0], *(inputs[i] for i in range(2, len(values), 3))]
    if any(v is None for v in scales) or any(np.dtype(m.dtype).itemsize != 1 for m in metas):
        return {}  # 8-bit only: one 256-entry table per input
    y_scale, y_zero, out_dtype = values[0], values[1], np.dtype(outputs[0].dtype)
    tables, same = [], []
    for i in range(2, len(values), 3):
        dtype, scale, zero = inputs[i].dtype, values[i + 1], values[i + 2]
        same.append(_one(scale) == _one(y_scale) and int(_one(zero)) == int(_one(y_zero)))
        tables.append(_table(dtype, scale, zero, y_scale, y_zero, out_dtype, lambda r: r).astype(out_dtype))
    return {"q_tables": np.stack(tables), "q_same": np.array(same)}


@kernel("QLinearConcat", domain=MS, constants=_concat_constants)
def qlinear_concat(y_scale, y_zero_point, *triples, out, axis, q_tables=None, q_same=None):
    axis = axis % out.ndim
    start = 0
    for i in range(0, len(triples), 3):
        x, scale, zero = triples[i : i + 3]
        target = out[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)]
        start += x.shape[axis]
        if q_same is not None:  # the tables made once (`_concat_constants`)
            if q_same[i // 3]:
                target[...] = x
            else:
                _lookup(x, q_tables[i // 3], target)
        elif _one(scale) == _one(y_scale) and int(_one(zero)) == int(_one(y_zero_point)):
            target[...] = x
        else:
            _lookup(x, _table(x.dtype, scale, zero, y_scale, y_zero_point, out.dtype, lambda r: r), target)


def _average(total: np.ndarray, count, x_scale, y_scale, y_zero, out) -> None:
    real = total * (_one(x_scale) / _one(y_scale)) / count
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = np.clip(np.rint(real).astype(np.int64) + int(_one(y_zero)), lo, hi)


def _pool_parameters(x_scale, x_zero, y_scale, y_zero, out) -> tuple[int, float, np.ndarray]:
    return int(_one(x_zero)), _one(x_scale) / _one(y_scale), np.array([int(_one(y_zero)), *qa.dtype_range(out.dtype)])


def _compiled_pool(x, out) -> bool:
    return POOL is not None and x.dtype.itemsize == 1 and out.dtype.itemsize == 1 and x.flags.c_contiguous


@kernel("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, *, out, channels_last=0):
    if not channels_last and _compiled_pool(x, out) and out.flags.c_contiguous:
        zero, ratio, q = _pool_parameters(x_scale, x_zero_point, y_scale, y_zero_point, out)
        GLOBAL_POOL(x.reshape(x.shape[0] * x.shape[1], -1), zero, ratio, q, out.reshape(-1))
        return
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in axes]))
    total = x.sum(axis=axes, dtype=np.int64, keepdims=True) - int(_one(x_zero_point)) * count
    _average(total.reshape(out.shape), count, x_scale, y_scale, y_zero_point, out)


@kernel("QLinearAveragePool", domain=MS)
def qlinear_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, *, out, auto_pad="NOTSET", ceil_mode=0,
                         count_include_pad=0, kernel_shape=None, pads=None, strides=None, channels_last=0):  # fmt: skip
    if channels_last:
        raise ValueError("QLinearAveragePool: channels_last=1 is not supported; accepted: 0 (NCHW)")
    geo = window_geometry(x.shape, out.shape, kernel_shape, auto_pad, pads, strides)
    if len(geo.kernel) == 2 and _compiled_pool(x, out):
        zero, ratio, q = _pool_parameters(x_scale, x_zero_point, y_scale, y_zero_point, out)
        compiled_geo = np.asarray((*geo.strides, 1, 1, *geo.begin), np.int64)
        for n in range(x.shape[0]):
            POOL(x[n], zero, ratio, compiled_geo, *geo.kernel, bool(count_include_pad), q, out[n])
        return
    zero = int(_one(x_zero_point))
    padded = np.empty((*x.shape[:2], *padded_extent(x.shape[2:], geo)), dtype=np.int32)
    pad_into(padded, x.astype(np.int32) - zero, geo, 0)
    rank = len(geo.kernel)
    total = windows(padded, geo).sum(axis=tuple(range(-rank, 0)), dtype=np.int64)
    if count_include_pad:
        count = np.full(geo.out, int(np.prod(geo.kernel)))
    else:
        inside = np.zeros(padded.shape[2:], dtype=np.int32)
        inside[tuple(slice(b, b + n) for b, n in zip(geo.begin, x.shape[2:], strict=True))] = 1
        count = windows(inside, geo).sum(axis=tuple(range(-rank, 0)))
    _average(total, count, x_scale, y_scale, y_zero_point, out)


def _float_op(op, **attributes):
    """memplan's own float kernel of `op` (with the node's attributes) as a function of reals."""
    from runtime.kernels import TensorMeta, call, get_kernel

    k = get_kernel(op)
    if k is None or k.workspace is not None and k.multi_output:
        raise ValueError(f"QLinearUnary: no float kernel for {op!r}")

    def through(real: np.ndarray) -> np.ndarray:
        result = np.empty_like(real)
        ws = None
        if k.workspace is not None:
            meta = TensorMeta(real.shape, real.dtype)
            ws = np.zeros(k.workspace([meta], [meta], **attributes), dtype=np.uint8)
        call(k, [real], [result], ws, attributes, 21)
        return result

    return through


@kernel("QLinearUnary", domain="memplan", inplace=(0,), constants=_table_constants(_float_op))
def qlinear_unary(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, out, op, q_lookup=None,
                  prepared_weights=True, **attributes):  # fmt: skip
    """Any one-input float op between a DequantizeLinear and a QuantizeLinear (`runtime.fuse_qdq`:
    HardSwish, HardSigmoid, Tanh, ...) as a table of its 256 values, made by memplan's own float
    kernel of `op` (with the node's attributes) as onnxruntime makes its QLinear tables."""
    if q_lookup is None:
        q_lookup = _table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point, out.dtype, _float_op(op, **attributes))
    _lookup(x, q_lookup, out)
