"""ADD, SUB, MUL (with numpy broadcasting), QUANTIZE and DEQUANTIZE: TFLite's integer forms and float32.

ADD and SUB rescale both inputs to a common scale with 20 bits of headroom (TFLite's int8
`left_shift`), then the sum to the output's; MUL scales the product of the offset inputs once.
Over 8-bit tensors (compiled loops on) they are one compiled pass (`jit_qlinear.BINARY`, QLinearAdd's
and QLinearMul's: the same arithmetic) through a block of int64 sums in the workspace: numpy's
route makes about eight int64 temporaries of the output's size beside the arena; it runs a block
of the output at a time, so that its temporaries stay small whatever the tensor's size.
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._blocks import block_slices
from runtime.kernels._scratch import Scratch, scratch_bytes, shared_scratch
from runtime.kernels.protocol import Bound
from runtime.kernels.quantized.common import TFLITE, float_activation, merged_shapes, quant
from runtime.kernels.quantized.jit_qlinear import BINARY, BLOCK

LEFT_SHIFT = {1: 20, 2: 15}  # by the integer's size in bytes: int8/uint8, int16
NUMPY_BLOCK = 1 << 12  # elements of numpy's route at a time, so its int64 temporaries stay small


def _eight_bit(a, b, out) -> bool:
    """Whether the compiled pass takes these tensors (arrays or metas): 8-bit integers of one type
    in, 8-bit out, shapes that merge into four axes."""
    types = [np.dtype(t.dtype) for t in (a, b, out)]
    if BINARY is None or types[0] != types[1] or any(t.itemsize != 1 or t.kind not in "iu" for t in types):
        return False
    return len(merged_shapes(tuple(a.shape), tuple(b.shape), tuple(out.shape))[2]) == 4


def _binary_constants(sign: int, dtype, out_dtype, activation, q_inputs, q_outputs) -> dict:
    """The compiled pass's constants (`jit_qlinear.BINARY`): the output's (multiplier, shift, zero
    point, activation's lo and hi, tables' index offset) and the inputs' zero points; ADD's and SUB's
    tables of each input's rescaled 256 values (SUB's second negated), none for MUL (`sign` 0).
    Empty where the output's scaling has a left shift: that ADD stays on numpy's route."""
    q1, q2, qo = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input"), quant(q_outputs, 0, "output")
    z1, z2, zo = int(q1.zero_point[0]), int(q2.zero_point[0]), int(qo.zero_point[0])
    lo, hi = qa.activation_range(activation, qo, out_dtype)
    first, last = qa.dtype_range(dtype)
    values = np.arange(first, last + 1, dtype=np.int64)
    zeros = np.array([z1, z2], np.int64)
    if sign == 0:
        m, s = qa.quantize_multiplier(float(q1.scale[0]) * float(q2.scale[0]) / float(qo.scale[0]))
        return {"q_params": np.array([m[0], s[0], zo, lo, hi, -first]), "q_zeros": zeros,
                "q_table_a": _NO_TABLE, "q_table_b": _NO_TABLE}  # fmt: skip
    left = LEFT_SHIFT[1]
    twice_max = 2 * float(max(q1.scale[0], q2.scale[0]))
    m1, s1 = qa.quantize_multiplier(float(q1.scale[0]) / twice_max)
    m2, s2 = qa.quantize_multiplier(float(q2.scale[0]) / twice_max)
    mo, so = qa.quantize_multiplier(twice_max / ((1 << left) * float(qo.scale[0])))
    if so[0] > 0:
        return {}
    return {
        "q_params": np.array([mo[0], so[0], zo, lo, hi, -first]),
        "q_zeros": zeros,
        "q_table_a": qa.multiply_smaller_than_one((values - z1) << left, m1, s1),
        "q_table_b": sign * qa.multiply_smaller_than_one((values - z2) << left, m2, s2),
    }


_NO_TABLE = np.zeros(0, np.int64)  # MUL's: the compiled pass adds through tables only when it has them


def _constants(sign: int):
    def constants(values, inputs, outputs, *, fused_activation_function="NONE", q_inputs=None, q_outputs=None, **_):
        if not _eight_bit(inputs[0], inputs[1], outputs[0]):
            return {}
        args = (inputs[0].dtype, outputs[0].dtype, fused_activation_function, q_inputs, q_outputs)
        return _binary_constants(sign, *args)

    return constants


def _workspace(inputs, outputs, **_) -> int:
    """A block of the compiled pass's int64 sums."""
    return scratch_bytes(((BLOCK,), np.int64)) if _eight_bit(inputs[0], inputs[1], outputs[0]) else 0


def _compiled(a, b, out, ws, sign: int, activation, q_inputs, q_outputs, made: dict) -> bool:
    """The 8-bit pass into `out` if it takes these tensors; False leaves the call to numpy's route."""
    if not (_eight_bit(a, b, out) and out.size and all(v.flags.c_contiguous for v in (a, b, out))):
        return False
    if "q_params" not in made:  # constants not prepared (prepared_weights off, or a direct call)
        made = _binary_constants(sign, a.dtype, out.dtype, activation, q_inputs, q_outputs)
        if not made:
            return False
    shapes = merged_shapes(a.shape, b.shape, out.shape)
    a4, b4, out4 = (v.reshape(shape) for v, shape in zip((a, b, out), shapes, strict=True))
    raw = Scratch(ws, "TFLite ADD/SUB/MUL").take((BLOCK,), np.int64)
    BINARY(a4, b4, made["q_table_a"], made["q_table_b"], made["q_zeros"], made["q_params"], out4, raw)
    return True


def _bind(inputs, outputs, attrs, general):
    """The compiled pass bound once for the node's shapes (merged views' shapes, its block of sums
    carved once from the workspace, or from the thread's shared scratch without one); the general
    call where the constants are not prepared or off the compiled pass."""
    a, b, y = inputs[0], inputs[1], outputs[0]
    if not _eight_bit(a, b, y) or not int(np.prod(y.shape)):
        return None
    shapes = merged_shapes(tuple(a.shape), tuple(b.shape), tuple(y.shape))
    carved: list = [None, None]  # the workspace last given and its block: a node's is the same every run

    def run(x, z, *, out, ws=None, **made):
        if "q_params" not in made or not (x.flags.c_contiguous and z.flags.c_contiguous and out.flags.c_contiguous):
            general((x, z), out, ws, made)
            return
        space = shared_scratch(BLOCK * 8) if ws is None else ws
        if carved[0] is not space:
            carved[:] = space, Scratch(space, "TFLite ADD/SUB/MUL").take((BLOCK,), np.int64)
        tables = made["q_table_a"], made["q_table_b"], made["q_zeros"], made["q_params"]
        BINARY(x.reshape(shapes[0]), z.reshape(shapes[1]), *tables, out.reshape(shapes[2]), carved[1])

    return Bound(run, takes_attributes=True)


def _blocks(a, b, out, step) -> None:
    """`step(a_block, b_block, out_block)` over `out` a block at a time (inputs broadcast to it), so
    that numpy's int64 temporaries are a block's, not the tensor's."""
    full_a, full_b = np.broadcast_to(a, out.shape), np.broadcast_to(b, out.shape)
    for index in block_slices(out.shape, NUMPY_BLOCK):
        step(full_a[index], full_b[index], out[index])


def _add_or_sub(a, b, out, ws, sign, activation, q_inputs, q_outputs, made) -> None:
    if a.dtype.kind == "f":
        np.add(a, b, out=out) if sign > 0 else np.subtract(a, b, out=out)
        float_activation(out, activation)
        return
    if a.dtype.kind != "i" and a.dtype.kind != "u" or out.dtype.itemsize > 2:
        np.add(a, b, out=out) if sign > 0 else np.subtract(a, b, out=out)
        return
    if _compiled(a, b, out, ws, sign, activation, q_inputs, q_outputs, made):
        return
    q1, q2, qo = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input"), quant(q_outputs, 0, "output")
    left = LEFT_SHIFT[out.dtype.itemsize]
    twice_max = 2 * float(max(q1.scale[0], q2.scale[0]))
    m1, s1 = qa.quantize_multiplier(float(q1.scale[0]) / twice_max)
    m2, s2 = qa.quantize_multiplier(float(q2.scale[0]) / twice_max)
    mo, so = qa.quantize_multiplier(twice_max / ((1 << left) * float(qo.scale[0])))
    lo, hi = qa.activation_range(activation, qo, out.dtype)
    z1, z2, zo = int(q1.zero_point[0]), int(q2.zero_point[0]), int(qo.zero_point[0])

    def step(x, y, target) -> None:
        x1 = (x.astype(np.int64) - z1) << left
        x2 = (y.astype(np.int64) - z2) << left
        raw = qa.multiply_smaller_than_one(x1, m1, s1) + sign * qa.multiply_smaller_than_one(x2, m2, s2)
        target[...] = np.clip(qa.multiply_smaller_than_one(raw, mo, so) + zo, lo, hi)

    _blocks(a, b, out, step)


@kernel("ADD", domain=TFLITE, inplace=(0, 1), constants=_constants(1), workspace=_workspace, bind=_bind)
def add(a, b, *, out, ws=None, fused_activation_function="NONE", q_inputs=None, q_outputs=None, **made):
    _add_or_sub(a, b, out, ws, 1, fused_activation_function, q_inputs, q_outputs, made)


@kernel("SUB", domain=TFLITE, inplace=(0, 1), constants=_constants(-1), workspace=_workspace, bind=_bind)
def sub(a, b, *, out, ws=None, fused_activation_function="NONE", q_inputs=None, q_outputs=None, **made):
    _add_or_sub(a, b, out, ws, -1, fused_activation_function, q_inputs, q_outputs, made)


@kernel("MUL", domain=TFLITE, inplace=(0, 1), constants=_constants(0), workspace=_workspace, bind=_bind)
def mul(a, b, *, out, ws=None, fused_activation_function="NONE", q_inputs=None, q_outputs=None, **made):
    if a.dtype.kind == "f" or out.dtype == np.int32:
        np.multiply(a, b, out=out)
        float_activation(out, fused_activation_function) if out.dtype.kind == "f" else None
        return
    if _compiled(a, b, out, ws, 0, fused_activation_function, q_inputs, q_outputs, made):
        return
    q1, q2, qo = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input"), quant(q_outputs, 0, "output")
    multiplier, shift = qa.quantize_multiplier(float(q1.scale[0]) * float(q2.scale[0]) / float(qo.scale[0]))
    lo, hi = qa.activation_range(fused_activation_function, qo, out.dtype)
    z1, z2, zo = int(q1.zero_point[0]), int(q2.zero_point[0]), int(qo.zero_point[0])

    def step(x, y, target) -> None:
        product = (x.astype(np.int64) - z1) * (y.astype(np.int64) - z2)
        target[...] = qa.requantize(product, multiplier, shift, zo, lo, hi)

    _blocks(a, b, out, step)


@kernel("QUANTIZE", domain=TFLITE)
def quantize(x, *, out, q_inputs=None, q_outputs=None, **_):
    qo = quant(q_outputs, 0, "output")
    lo, hi = qa.dtype_range(out.dtype)
    if x.dtype.kind == "f":
        ratio = x.astype(np.float32) / np.float32(qo.scale[0])  # float32 division, as TFLite's AffineQuantize
        out[...] = np.clip(qa.round_half_away(ratio).astype(np.int64) + int(qo.zero_point[0]), lo, hi)
        return
    qi = quant(q_inputs, 0, "input")
    multiplier, shift = qa.quantize_multiplier(float(qi.scale[0]) / float(qo.scale[0]))
    shifted = x.astype(np.int64) - int(qi.zero_point[0])
    out[...] = qa.requantize(shifted, multiplier, shift, int(qo.zero_point[0]), lo, hi)


@kernel("DEQUANTIZE", domain=TFLITE)
def dequantize(x, *, out, q_inputs=None, **_):
    if x.dtype == np.float16:  # float16 weights: a plain widening
        np.copyto(out, x, casting="unsafe")
        return
    qi = quant(q_inputs, 0, "input")
    if qi.per_channel:
        shape = [1] * x.ndim
        shape[qi.axis or 0] = -1
        scale, zero = qi.scale.astype(np.float64).reshape(shape), qi.zero_point.reshape(shape)
    else:
        scale, zero = float(qi.scale[0]), int(qi.zero_point[0])
    np.copyto(out, scale * (x.astype(np.int64) - zero), casting="unsafe")  # double product, then float32


@kernel("RELU", domain=TFLITE, inplace=(0,))
def relu(x, *, out, q_inputs=None, q_outputs=None, **_):
    if x.dtype.kind == "f":
        np.maximum(x, 0, out=out)
        return
    qi, qo = quant(q_inputs, 0, "input"), quant(q_outputs, 0, "output")
    # TFLite Micro divides the scales in float32; the floor is the output's zero point.
    multiplier, shift = qa.quantize_multiplier(float(np.float32(qi.scale[0]) / np.float32(qo.scale[0])))
    lo, hi = qa.dtype_range(out.dtype)
    floor = max(lo, int(qo.zero_point[0]))
    shifted = x.astype(np.int64) - int(qi.zero_point[0])
    out[...] = qa.requantize(shifted, multiplier, shift, int(qo.zero_point[0]), floor, hi)


@kernel("RELU6", domain=TFLITE, inplace=(0,))
def relu6(x, *, out, q_inputs=None, **_):
    if x.dtype.kind == "f":
        np.clip(x, 0, 6, out=out)
        return
    qi = quant(q_inputs, 0, "input")
    lo, hi = qa.dtype_range(out.dtype)
    zero = int(qi.zero_point[0])
    six = min(hi, max(lo, zero + int(qa.round_half_away(np.float32(6.0) / np.float32(qi.scale[0])))))
    np.clip(x, zero, six, out=out)  # TFLite Micro clamps the input's integers: the output keeps its scale


INPUT_BITS = 4  # integer bits of LOGISTIC's fixed-point input


@kernel("LOGISTIC", domain=TFLITE, inplace=(0,))
def logistic(x, *, out, q_inputs=None, **_):
    if x.dtype.kind == "f":
        np.divide(1, 1 + np.exp(-x), out=out)
        return
    if x.dtype != np.int8:
        raise ValueError(f"LOGISTIC: {x.dtype} input; accepted: int8 (output zero point -128) or float32")
    qi = quant(q_inputs, 0, "input")
    # TFLite Micro's parameters: the input scale in Q4.27 as a significand and exponent, and the
    # radius beyond which the output saturates.
    fraction, left = np.frexp(float(qi.scale[0]) * float(1 << (31 - INPUT_BITS)))
    multiplier = int(qa.round_half_away(fraction * float(1 << 31)))
    radius = int(np.floor(float((1 << INPUT_BITS) - 1) * float(1 << (31 - INPUT_BITS)) / float(1 << int(left))))
    values = x.astype(np.int64) - int(qi.zero_point[0])
    q4 = qa.multiply_by_quantized_multiplier(np.clip(values, -radius, radius), multiplier, int(left))
    positive = qa.one_over_one_plus_x(qa.exp_on_negative_values(-np.abs(q4), INPUT_BITS))
    result = np.where(q4 > 0, positive, qa.INT32_MAX - positive)
    result = np.where(q4 == 0, 1 << 30, result)
    scaled = np.clip(qa.rounding_divide_by_pot(result, 23) - 128, -128, 127)
    out[...] = np.where(values <= -radius, -128, np.where(values >= radius, 127, scaled))


@kernel("TANH", domain=TFLITE, inplace=(0,))
def tanh(x, *, out, q_inputs=None, **_):
    if x.dtype.kind == "f":
        np.tanh(x, out=out)
        return
    if x.dtype != np.int8:
        raise ValueError(f"TANH: {x.dtype} input; accepted: int8 (output scale 1/128, zero point 0) or float32")
    qi = quant(q_inputs, 0, "input")
    fraction, left = np.frexp(float(qi.scale[0]) * float(1 << (31 - INPUT_BITS)))
    multiplier = int(qa.round_half_away(fraction * float(1 << 31)))
    radius = int(np.floor(float((1 << INPUT_BITS) - 1) * float(1 << (31 - INPUT_BITS)) / float(1 << int(left))))
    values = x.astype(np.int64) - int(qi.zero_point[0])
    q4 = qa.multiply_by_quantized_multiplier(np.clip(values, -radius, radius), multiplier, int(left))
    # tanh of -|a| from exp(-2|a|): the same raw value read with one more integer bit.
    negative = qa.one_minus_x_over_one_plus_x(qa.exp_on_negative_values(-np.abs(q4), INPUT_BITS + 1))
    result = np.where(q4 < 0, -negative, negative)
    result = np.where(q4 == 0, 0, result)
    scaled = np.clip(qa.rounding_divide_by_pot(result, 24), -128, 127)
    out[...] = np.where(values <= -radius, -128, np.where(values >= radius, 127, scaled))


@kernel("PRELU", domain=TFLITE)
def prelu(x, alpha, *, out, q_inputs=None, q_outputs=None, **_):
    if x.dtype.kind == "f":
        np.copyto(out, np.where(x >= 0, x, x * alpha))
        return
    qi, qa_, qo = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input"), quant(q_outputs, 0, "output")
    m1, s1 = qa.quantize_multiplier(float(qi.scale[0]) / float(qo.scale[0]))
    m2, s2 = qa.quantize_multiplier(float(qi.scale[0]) * float(qa_.scale[0]) / float(qo.scale[0]))
    values = x.astype(np.int64) - int(qi.zero_point[0])
    slopes = alpha.astype(np.int64) - int(qa_.zero_point[0])
    positive = qa.multiply_by_quantized_multiplier(values, m1, s1)
    negative = qa.multiply_by_quantized_multiplier(values * slopes, m2, s2)
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = np.clip(np.where(values >= 0, positive, negative) + int(qo.zero_point[0]), lo, hi)


@kernel("HARD_SWISH", domain=TFLITE, inplace=(0,))
def hard_swish(x, *, out, q_inputs=None, q_outputs=None, **_):
    if x.dtype.kind == "f":
        np.copyto(out, x * np.clip(x + 3, 0, 6) / 6)
        return
    qi, qo = quant(q_inputs, 0, "input"), quant(q_outputs, 0, "output")
    # TensorFlow Lite Micro's parameters: float32 scales, 16-bit fixed-point multipliers.
    hires = np.float32(1.0 / 128.0) * np.float32(qi.scale[0])
    out_m, out_e = qa.multiplier16(float(hires / np.float32(qo.scale[0])))
    relu_m, relu_e = qa.multiplier16(float(hires / np.float32(3.0 / 32768.0)))
    values = qa.wrap16(x.astype(np.int64) - int(qi.zero_point[0]))
    hires_values = qa.wrap16(values * (1 << 7))
    preshift = qa.srdhm16(hires_values, out_m)
    reluish = hires_values
    if relu_e > 0:
        reluish = qa.saturating_left_shift16(reluish, relu_e - 1)
    reluish = qa.srdhm16(reluish, relu_m)
    if relu_e > 0:
        reluish = qa.saturating_left_shift16(reluish, 1)
    if relu_e < 0:
        reluish = qa.rounding_divide_by_pot(reluish, -relu_e)
    reluish = (reluish + (1 << 15)) >> 1
    value = qa.rounding_divide_by_pot(qa.doubling_high_mul16(reluish, preshift), -out_e)
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = np.clip(qa.wrap16(value + int(qo.zero_point[0])), lo, hi)
