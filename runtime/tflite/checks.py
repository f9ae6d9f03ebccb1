"""Load-time checks of the stateful TFLite operators whose kernels accept a narrow form: the LSTM and
the SVDF. A model outside that form is refused when it is read, with a `ModelError` naming the
operator's index, the input at fault and what is accepted, never later inside a run.

UNIDIRECTIONAL_SEQUENCE_LSTM: TensorFlow Lite Micro's standard LSTM, as its kernel accepts it: the
24 inputs of the schema with the input gate's weights and every bias given; no peephole, projection
or layer-norm inputs; hidden and cell state as variable tensors (batch, units); a tanh cell
activation; float32 throughout, or int8 input, hidden state and output with int8 per-tensor weights,
int32 biases and an int16 cell state, or the same with int16 activations and int64 biases (TFLite's
16x8 LSTM). TensorFlow Lite Micro's LSTM refuses the peephole, projection, layer-norm and CIFG
variants too. SVDF: a 2-D input, weights_feature (filters, depth), weights_time (filters, memory),
an optional bias (units), the activation state (batch, filters x memory) as a variable tensor;
float32, or int8 with an int8 or int16 state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from runtime.errors import ModelError
from runtime.tflite.model import TfModel, TfOperator, TfTensor

LSTM_INPUTS = (
    "input", "input_to_input_weights", "input_to_forget_weights", "input_to_cell_weights",
    "input_to_output_weights", "recurrent_to_input_weights", "recurrent_to_forget_weights",
    "recurrent_to_cell_weights", "recurrent_to_output_weights", "cell_to_input_weights",
    "cell_to_forget_weights", "cell_to_output_weights", "input_gate_bias", "forget_gate_bias",
    "cell_gate_bias", "output_gate_bias", "projection_weights", "projection_bias", "output_state",
    "cell_state", "input_layer_norm_coefficients", "forget_layer_norm_coefficients",
    "cell_layer_norm_coefficients", "output_layer_norm_coefficients",
)  # fmt: skip
_LSTM_REQUIRED = (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14, 15, 18, 19)
_LSTM_VARIANTS = {9: "peephole", 10: "peephole", 11: "peephole", 16: "projection", 17: "projection",
                  20: "layer norm", 21: "layer norm", 22: "layer norm", 23: "layer norm"}  # fmt: skip
SVDF_INPUTS = ("input", "weights_feature", "weights_time", "bias", "activation_state")


class _Op:
    """One operator's tensors by position, and its errors phrased with its index and type."""

    def __init__(self, op: TfOperator, tensors: Sequence[TfTensor], names: Sequence[str]) -> None:
        self.op, self.tensors, self.names = op, tensors, names

    def fail(self, what: str) -> ModelError:
        return ModelError(f"operator {self.op.index} ({self.op.op_type}): {what}")

    def label(self, j: int) -> str:
        return f"input {j} ({self.names[j]})"

    def get(self, j: int) -> TfTensor | None:
        i = self.op.inputs[j] if j < len(self.op.inputs) else -1
        return self.tensors[i] if i >= 0 else None

    def need(self, j: int, why: str) -> TfTensor:
        t = self.get(j)
        if t is None:
            raise self.fail(f"{self.label(j)} is missing; {why}")
        return t

    def shape(self, j: int, want: tuple[int, ...]) -> None:
        t = self.get(j)
        if t is not None and t.shape != want:
            raise self.fail(f"{self.label(j)} has shape {list(t.shape)}; accepted: {list(want)}")

    def dtype(self, j: int, *accepted: type) -> None:
        t = self.get(j)
        if t is not None and t.dtype not in [np.dtype(a) for a in accepted]:
            names = " or ".join(str(np.dtype(a)) for a in accepted)
            raise self.fail(f"{self.label(j)} is {t.dtype}; accepted here: {names}")

    def variable(self, j: int) -> None:
        t = self.get(j)
        if t is not None and not t.is_variable:
            raise self.fail(f"{self.label(j)} must be a variable tensor (a state kept from run to run)")

    def per_tensor(self, j: int) -> None:
        t = self.get(j)
        if t is not None and (t.quant is None or t.quant.scale.size != 1):
            found = "no quantization" if t.quant is None else f"{t.quant.scale.size} per-channel scales"
            raise self.fail(f"{self.label(j)} has {found}; accepted: one scale and zero point (per-tensor)")


def check_lstm(op: _Op) -> None:
    if len(op.op.inputs) != 24 or len(op.op.outputs) != 1:
        raise op.fail(
            f"{len(op.op.inputs)} inputs and {len(op.op.outputs)} outputs; accepted: the schema's 24 inputs "
            "(-1 for an omitted optional one) and one output"
        )
    for j, variant in _LSTM_VARIANTS.items():
        if op.get(j) is not None:
            raise op.fail(
                f"{op.label(j)} is given: the {variant} LSTM is not supported, and TensorFlow Lite Micro's LSTM does "
                "not take it either; accepted: the standard LSTM (inputs 9-11, 16, 17 and 20-23 omitted)"
            )
    for j in _LSTM_REQUIRED:
        op.need(
            j,
            "the standard LSTM needs it (a coupled input gate, CIFG, is not supported, and TensorFlow Lite Micro's "
            "LSTM does not take it either)",
        )
    attrs = op.op.attributes
    if attrs.get("fused_activation_function", "TANH") != "TANH":
        raise op.fail(f"fused_activation_function {attrs['fused_activation_function']!r}; accepted: 'TANH'")
    if attrs.get("diagonal_recurrent_tensors"):
        raise op.fail("diagonal_recurrent_tensors=True is not supported; accepted: full recurrent weight matrices")
    x, hidden = op.tensors[op.op.inputs[0]], op.tensors[op.op.inputs[18]]
    if len(x.shape) != 3:
        raise op.fail(f"{op.label(0)} has shape {list(x.shape)}; accepted: 3-D (batch, time, depth) or time-major")
    if len(hidden.shape) != 2:
        raise op.fail(f"{op.label(18)} has shape {list(hidden.shape)}; accepted: 2-D (batch, units)")
    time_major = bool(attrs.get("time_major", False))
    batches, depth, units = (x.shape[1] if time_major else x.shape[0]), x.shape[2], hidden.shape[1]
    for j in (1, 2, 3, 4):
        op.shape(j, (units, depth))
    for j in (5, 6, 7, 8):
        op.shape(j, (units, units))
    for j in (12, 13, 14, 15):
        op.shape(j, (units,))
    op.shape(18, (batches, units))
    op.shape(19, (batches, units))
    op.variable(18)
    op.variable(19)
    out = op.tensors[op.op.outputs[0]]
    if out.shape != (*x.shape[:2], units):
        raise op.fail(f"output 0 has shape {list(out.shape)}; accepted: {[*x.shape[:2], units]}")
    if x.dtype == np.float32:
        for j in _LSTM_REQUIRED:
            op.dtype(j, np.float32)
    elif x.dtype in (np.int8, np.int16):
        _check_integer_lstm(op, x.dtype)
    else:
        raise op.fail(
            f"{op.label(0)} is {x.dtype}; accepted: float32, int8 (TFLite's 8x8->16 integer LSTM) or int16 (its "
            "16x8->16 LSTM), as TensorFlow Lite Micro's LSTM"
        )
    if out.dtype != x.dtype:
        raise op.fail(f"output 0 is {out.dtype}; accepted: {x.dtype}, the input's type")


def _check_integer_lstm(op: _Op, activations: np.dtype) -> None:
    """8x8->16 (int8 activations, int32 biases) or 16x8->16 (int16 activations, int64 biases): int8
    per-tensor weights and an int16 cell state either way, as TensorFlow Lite Micro runs them."""
    for j in range(1, 9):
        op.dtype(j, np.int8)
        op.per_tensor(j)
    for j in (12, 13, 14, 15):
        op.dtype(j, np.int64 if activations == np.int16 else np.int32)
    op.dtype(18, activations.type)
    op.dtype(19, np.int16)
    for j in (0, 18, 19):
        op.per_tensor(j)
    cell = op.tensors[op.op.inputs[19]]
    assert cell.quant is not None  # per_tensor checked it
    power = np.log2(float(cell.quant.scale[0]))
    if abs(power - round(power)) > 1e-3 or int(cell.quant.zero_point[0]) != 0:
        raise op.fail(
            f"{op.label(19)} has scale {float(cell.quant.scale[0])!r} and zero point {int(cell.quant.zero_point[0])}; "
            "accepted: a power-of-two scale and zero point 0 (the integer tanh reads it as a shift)"
        )


def check_svdf(op: _Op) -> None:
    if len(op.op.inputs) != 5 or len(op.op.outputs) != 1:
        raise op.fail(f"{len(op.op.inputs)} inputs and {len(op.op.outputs)} outputs; accepted: 5 inputs and one output")
    x, wf, wt = (op.need(j, "SVDF needs it") for j in (0, 1, 2))
    op.need(4, "SVDF needs its activation state")
    rank = int(op.op.attributes.get("rank", 1))
    if len(x.shape) != 2 or len(wf.shape) != 2 or len(wt.shape) != 2:
        raise op.fail(
            f"input, weights_feature and weights_time have shapes {list(x.shape)}, {list(wf.shape)}, "
            f"{list(wt.shape)}; accepted: 2-D each"
        )
    filters, memory = wf.shape[0], wt.shape[1]
    if rank < 1 or filters % rank:
        raise op.fail(f"rank {rank} does not divide the {filters} filters; accepted: a rank >= 1 that divides them")
    op.shape(1, (filters, x.shape[1]))
    op.shape(2, (filters, memory))
    op.shape(3, (filters // rank,))
    op.shape(4, (x.shape[0], filters * memory))
    op.variable(4)
    out = op.tensors[op.op.outputs[0]]
    if out.shape != (x.shape[0], filters // rank):
        raise op.fail(f"output 0 has shape {list(out.shape)}; accepted: {[x.shape[0], filters // rank]}")
    if x.dtype == np.float32:
        for j in (1, 2, 3, 4):
            op.dtype(j, np.float32)
    elif x.dtype == np.int8:
        op.dtype(1, np.int8)
        op.dtype(2, np.int8, np.int16)
        op.dtype(3, np.int32)
        op.dtype(4, wt.dtype.type)  # TFLite Micro reads the state in weights_time's type
    else:
        raise op.fail(f"{op.label(0)} is {x.dtype}; accepted: float32 or int8")


CHECKS: dict[str, tuple[Callable[[_Op], None], Sequence[str]]] = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (check_lstm, LSTM_INPUTS),
    "SVDF": (check_svdf, SVDF_INPUTS),
}


def check_operators(model: TfModel) -> None:
    """Refuse, naming the operator, any LSTM or SVDF its kernel does not accept."""
    for op in model.operators:
        found = CHECKS.get(op.op_type) if op.domain == "tflite" else None
        if found is not None:
            check, names = found
            check(_Op(op, model.tensors, names))
