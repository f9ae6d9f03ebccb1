"""UNIDIRECTIONAL_SEQUENCE_LSTM: TensorFlow Lite Micro's standard LSTM (no peephole, projection,
layer norm or coupled input gate), float32, and integer with TFLite's arithmetic: int8 input and
hidden state with int32 biases (8x8->16), or int16 ones with int64 biases (16x8->16); int8
weights and an int16 cell state at a power-of-two scale either way.

Each time step computes the four gates from the input's step and the hidden state, each the sum of
two fully-connected products (the input's with the gate's bias, the hidden state's without); the
forget, input and output gates go through a sigmoid, the cell gate through tanh. Then
``cell = forget * cell + input * cell_gate`` (clipped when cell_clip > 0) and
``hidden = output_gate * tanh(cell)``, copied into the output's step. In the integer LSTM every
product is requantized as TFLite does: the gates' sums to int16 at 2**-12, clamped after each
product and after their sum; sigmoid and tanh through TFLite's int16 lookups
(`runtime.kernels.quantized.tflite_lstm_int`); the element-wise products to the cell's scale and,
last, to the hidden state's scale and zero point. Batch rows are independent, so the numpy route
runs each time step over all rows at once, time-major or not; the compiled route
(`jit_tflite_lstm`, float32, or integer with weights of zero point 0) runs every step and row in
one call, its constants worked out at prepare.

The hidden and cell states (inputs 18 and 19) are variable tensors: the kernel updates them in
place, and a `runtime.Session` keeps them from run to run (`Session.reset_state` clears them), as
TensorFlow Lite Micro keeps them between invocations; given read-only, they are read and left as
they were. The workspace holds one batch row's four activated gates (compiled route), or the
step's input and hidden state as exact float64 rows (float32 for a float LSTM) and the two products
of all four gates (numpy route).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.quantized import tflite_lstm_int as li
from runtime.kernels.quantized.common import TFLITE, quant
from runtime.kernels.quantized.jit_tflite_lstm import LSTM, LSTM_FLOAT
from runtime.quantization import QuantParams

GATES = ("input", "forget", "cell", "output")  # TFLite's order of the weights, recurrent weights and biases
INPUT_WEIGHTS, RECURRENT_WEIGHTS, BIASES = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15)
HIDDEN, CELL = 18, 19
_GATE_Q = QuantParams(np.array([li.GATE_SCALE], np.float32), np.zeros(1, np.int64), None)


def sizes(x_shape, hidden_shape, time_major: bool) -> tuple[int, int, int, int]:
    """(time steps, batch rows, input depth, state depth)."""
    steps, batches = (x_shape[0], x_shape[1]) if time_major else (x_shape[1], x_shape[0])
    return steps, batches, x_shape[2], hidden_shape[-1]


def _compiled(inputs, q_inputs) -> bool:
    """The compiled route: a float32 LSTM, or an integer one whose weights have no zero point (as
    converters write them)."""
    if inputs[0].dtype.kind == "f":
        return LSTM_FLOAT is not None
    if LSTM is None or q_inputs is None:
        return False
    return all(q_inputs[i] is not None and not q_inputs[i].zero_point[0] for i in (*INPUT_WEIGHTS, *RECURRENT_WEIGHTS))


def _blocks(inputs, time_major, q_inputs=None):
    _, batches, depth, units = sizes(inputs[0].shape, inputs[HIDDEN].shape, time_major)
    if _compiled(inputs, q_inputs):  # one batch row's activated gates
        return [((4 * units,), np.float32 if inputs[0].dtype.kind == "f" else np.int64)]
    kind = np.float32 if inputs[0].dtype.kind == "f" else np.float64
    return [
        ((batches, depth), kind),
        ((batches, units), kind),
        ((batches, 4 * units), kind),
        ((batches, 4 * units), kind),
    ]


def lstm_workspace(inputs, outputs, time_major=False, q_inputs=None, **_) -> int:
    return scratch_bytes(*_blocks(inputs, time_major, q_inputs))


def _matrices(values, integer: bool) -> tuple[np.ndarray, np.ndarray]:
    """The four gates' input and recurrent weights side by side, (depth, 4 units) and (units, 4
    units), less their zero points for an integer LSTM: the operands of one product per step."""
    kind = np.float64 if integer else np.float32
    return tuple(  # type: ignore[return-value]
        np.ascontiguousarray(np.concatenate([values[i] for i in group], axis=0).T, dtype=kind)
        for group in (INPUT_WEIGHTS, RECURRENT_WEIGHTS)
    )


def lstm_constants(values, inputs, outputs, q_inputs=None, cell_clip=0.0, **_) -> dict:
    """At prepare: the compiled loop's arguments, or the gates' weight matrices and the step, with
    the multipliers and biases worked out."""
    if any(values[i] is None for i in (*INPUT_WEIGHTS, *RECURRENT_WEIGHTS, *BIASES)):
        return {}
    integer = inputs[0].dtype.kind in "iu"
    if _compiled(inputs, q_inputs):
        return {"prepared_loop": _loop_arguments(values, integer, q_inputs, cell_clip)}
    made = {"prepared_step": _step(values, integer, q_inputs, cell_clip)}
    if integer and any(quant(q_inputs, i, "input").zero_point[0] for i in (*INPUT_WEIGHTS, *RECURRENT_WEIGHTS)):
        return made  # weights with a zero point: subtracted on each call
    made["x_matrix"], made["h_matrix"] = _matrices(values, integer)
    return made


def _step(values, integer, q_inputs, cell_clip):
    if integer:
        return _integer_step(_integer_parameters(values, q_inputs, float(cell_clip)))
    return _float_step(values, float(cell_clip))


def lstm_prepare(inputs, outputs, time_major=False, cell_clip=0.0, q_inputs=None, **_) -> None:
    """The compiled loop compiled (or loaded from numba's cache) at prepare, not in the first run:
    one call on zeros of the node's shapes and dtypes, which give the same signature."""
    if not _compiled(inputs, q_inputs):
        return
    zeros = [None if m is None else np.zeros(m.shape, m.dtype) for m in inputs]
    x = np.zeros(inputs[0].shape, inputs[0].dtype)
    x.flags.writeable = False  # as a session hands its input over: a read-only view
    integer = inputs[0].dtype.kind in "iu"
    loop = _loop_arguments(zeros, integer, q_inputs, cell_clip)
    steps, batches, depth, units = sizes(inputs[0].shape, inputs[HIDDEN].shape, time_major)
    states = [np.zeros((batches, units), inputs[i].dtype) for i in (HIDDEN, CELL)]
    (gates,) = (np.zeros(*block) for block in _blocks(inputs, time_major, q_inputs))
    call: Any = LSTM if integer else LSTM_FLOAT
    call(x, bool(time_major), *loop, *states, np.zeros(outputs[0].shape, outputs[0].dtype), gates)


@kernel(
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    domain=TFLITE,
    workspace=lstm_workspace,
    constants=lstm_constants,
    prepare=lstm_prepare,
)
def unidirectional_sequence_lstm(*values, out, ws, time_major=False, cell_clip=0.0, q_inputs=None, x_matrix=None,
                                 h_matrix=None, prepared_step=None, prepared_loop=None, **_):  # fmt: skip
    x, hidden, cell = values[0], values[HIDDEN], values[CELL]
    steps, batches, depth, units = sizes(x.shape, hidden.shape, time_major)
    integer = x.dtype.kind in "iu"
    h_state = hidden.reshape(batches, units).copy() if not hidden.flags.writeable else hidden.reshape(batches, units)
    c_state = cell.reshape(batches, units).copy() if not cell.flags.writeable else cell.reshape(batches, units)
    scratch = Scratch(ws, "UNIDIRECTIONAL_SEQUENCE_LSTM")
    if _compiled(values, q_inputs):
        (gates,) = (scratch.take(*block) for block in _blocks(values, time_major, q_inputs))
        loop = prepared_loop or _loop_arguments(values, integer, q_inputs, cell_clip)
        (LSTM if integer else LSTM_FLOAT)(x, bool(time_major), *loop, h_state, c_state, out, gates)  # type: ignore[misc]
        return
    if x_matrix is None or h_matrix is None:
        x_matrix, h_matrix = _matrices(_less_zero_points(values, q_inputs) if integer else values, integer)
    x_row, h_row, x_sums, h_sums = (scratch.take(*block) for block in _blocks(values, time_major))
    step = prepared_step or _step(values, integer, q_inputs, cell_clip)
    for t in range(steps):
        x_t = x[t] if time_major else x[:, t]
        np.copyto(x_row, x_t, casting="unsafe")
        np.copyto(h_row, h_state, casting="unsafe")
        np.matmul(x_row, x_matrix, out=x_sums)
        np.matmul(h_row, h_matrix, out=h_sums)
        step(x_sums, h_sums, c_state, h_state)
        if time_major:
            out[t] = h_state
        else:
            out[:, t] = h_state


def _less_zero_points(values, q_inputs):
    picked = list(values)
    for i in (*INPUT_WEIGHTS, *RECURRENT_WEIGHTS):
        picked[i] = values[i].astype(np.int64) - int(quant(q_inputs, i, "input").zero_point[0])
    return picked


def _float_step(values, cell_clip):
    bias = np.concatenate([values[i] for i in BIASES]).astype(np.float32)

    def step(x_sums, h_sums, c_state, h_state):
        x_sums += bias
        x_sums += h_sums
        i, f, g, o = np.split(x_sums, 4, axis=1)
        for gate in (i, f, o):
            np.negative(gate, out=gate)
            np.exp(gate, out=gate)
            gate += 1
            np.reciprocal(gate, out=gate)
        np.tanh(g, out=g)
        c_state *= f
        c_state += i * g
        if cell_clip > 0:
            np.clip(c_state, -cell_clip, cell_clip, out=c_state)
        np.multiply(o, np.tanh(c_state), out=h_state)

    return step


def _integer_parameters(values, q_inputs, cell_clip) -> dict:
    """TFLite's integer LSTM's constants, worked out once: per gate column the multipliers of the
    two sums and what the bias and the rows' zero points add; the three element-wise products'
    multipliers; the cell's tanh and clip."""
    q_x, q_h, q_c = quant(q_inputs, 0, "input"), quant(q_inputs, HIDDEN, "input"), quant(q_inputs, CELL, "input")
    units = values[HIDDEN].shape[-1]

    def per_column(q_rows, group):
        found = [qa.dense_multiplier(q_rows, quant(q_inputs, i, "input"), _GATE_Q) for i in group]
        return tuple(np.repeat(np.concatenate([m[k] for m in found]), units).astype(np.int64) for k in (0, 1))

    x_zero, h_zero = int(q_x.zero_point[0]), int(q_h.zero_point[0])
    cell_scale = float(q_c.scale[0])
    biases = np.concatenate([values[i].astype(np.int64) for i in BIASES])
    return {
        "units": units,
        "x_mult": per_column(q_x, INPUT_WEIGHTS),
        "h_mult": per_column(q_h, RECURRENT_WEIGHTS),
        # the rows keep their zero points: what they add to each sum is taken off with the bias added
        "x_add": biases - x_zero * _column_sums(values, INPUT_WEIGHTS, q_inputs),
        "h_add": -h_zero * _column_sums(values, RECURRENT_WEIGHTS, q_inputs),
        "forget": qa.quantize_multiplier(li.ACTIVATED_SCALE * cell_scale / cell_scale),
        "input": qa.quantize_multiplier(li.ACTIVATED_SCALE * li.ACTIVATED_SCALE / cell_scale),
        "output": qa.quantize_multiplier(li.ACTIVATED_SCALE * li.ACTIVATED_SCALE / float(q_h.scale[0])),
        "cell_tanh": li.tanh_of_power(li.scale_power(cell_scale)),
        "clip": li.quantized_clip(cell_clip, cell_scale) if cell_clip > 0 else None,
        "h_zero": h_zero,
        "h_range": qa.dtype_range(values[HIDDEN].dtype),
        "wide": wide(values),
    }


def _loop_arguments(values, integer, q_inputs, cell_clip) -> tuple:
    """The compiled loop's constant arguments (`jit_tflite_lstm`'s, between x and the states)."""
    groups = (INPUT_WEIGHTS, RECURRENT_WEIGHTS)
    if not integer:
        weights = [np.ascontiguousarray(np.concatenate([values[i] for i in g]), np.float32) for g in groups]
        bias = np.concatenate([values[i] for i in BIASES]).astype(np.float32)
        return (*weights, bias, np.float32(cell_clip))
    p = _integer_parameters(values, q_inputs, float(cell_clip))
    weights = [np.ascontiguousarray(np.concatenate([values[i] for i in g]), np.int8) for g in groups]
    muls = np.array([[int(p[k][0][0]), int(p[k][1][0])] for k in ("forget", "input", "output")], np.int64)
    multiplier, shift = p["cell_tanh"]
    cell_tanh = np.array([3 << shift, 0] if multiplier == 0 else [multiplier, shift], np.int64)  # the power-of-two case
    clip = -1 if p["clip"] is None else p["clip"]
    return (*weights, p["x_add"], p["h_add"], *p["x_mult"], *p["h_mult"], p["wide"], li.SIGMOID_TABLE, muls,
            cell_tanh, clip, p["h_zero"], *p["h_range"])  # fmt: skip


def wide(values) -> bool:
    """The 16x8 LSTM (int16 activations, int64 biases): its gates' sums are int64 accumulators,
    which TFLite scales with its 64-bit MultiplyByQuantizedMultiplier (a 16-bit significand);
    the 8x8 LSTM's int32 ones with the 32-bit one. The rest of the arithmetic is the same."""
    return values[BIASES[0]].dtype == np.int64  # the biases are weights: known at prepare, unlike x


def _integer_step(p):
    """One time step of TFLite's 8x8->16 or 16x8->16 LSTM over all four gates at once (each column
    of the gate sums scaled by its gate's multiplier)."""
    units, clip = p["units"], p["clip"]

    def int16(x):
        return np.clip(x, -32768, 32767)

    def mul(a, b, multiplier, lo=-32768, hi=32767, zero=0):
        product = a.astype(np.int64) * b.astype(np.int64)
        return np.clip(qa.multiply_by_quantized_multiplier(product, *multiplier) + zero, lo, hi)

    gate_scale = qa.multiply_by_quantized_multiplier_64 if p["wide"] else qa.multiply_by_quantized_multiplier

    def step(x_sums, h_sums, c_state, h_state):
        # float64 sums of 8x8 and 16x8 products are exact (below 2**53)
        a = int16(gate_scale(np.rint(x_sums).astype(np.int64) + p["x_add"], *p["x_mult"]))
        b = int16(gate_scale(np.rint(h_sums).astype(np.int64) + p["h_add"], *p["h_mult"]))
        total = int16(a + b)
        gates = li.logistic16(total)
        i, f, g, o = np.split(gates, 4, axis=1)
        g[...] = li.tanh16(total[:, 2 * units : 3 * units])
        cell = int16(mul(f, c_state, p["forget"]) + mul(i, g, p["input"]))
        c_state[...] = cell if clip is None else np.clip(cell, -clip, clip)
        h_state[...] = mul(li.tanh16(c_state, *p["cell_tanh"]), o, p["output"], *p["h_range"], p["h_zero"])

    return step


def _column_sums(values, group, q_inputs) -> np.ndarray:
    """Per gate unit, the sum of its weights less their zero point: what the rows' zero point adds."""
    return np.concatenate(
        [values[i].astype(np.int64).sum(axis=1) - values[i].shape[1] * int(quant(q_inputs, i, "input").zero_point[0])
         for i in group]
    )  # fmt: skip
