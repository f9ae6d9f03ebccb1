"""LSTMs and SVDFs outside the form their kernels accept: refused when the model is read, with a
`ModelError` naming the operator's index, the input at fault and what is accepted; on the CLI too
(exit 2, no traceback)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import runtime
from tests.runtime.quantized.tflite_ops import OMITTED, Tensor, lstm_tensors, one_op_model, q

LSTM = "UNIDIRECTIONAL_SEQUENCE_LSTM"
OPTIONS = {"fused_activation_function": "TANH", "time_major": False}


def refused(inputs, outputs, options, match, op=LSTM):
    data = one_op_model(op, inputs, outputs, options)
    with pytest.raises(runtime.ModelError, match=match) as caught:
        runtime.load_model(data)
    assert str(caught.value).startswith(f"operator 0 ({op}): "), caught.value
    return data


def _lstm(dtype=np.int8):
    inputs, outputs = lstm_tensors(dtype, batches=2, steps=3, depth=5, units=4)
    return list(inputs), outputs


def test_the_generated_lstm_is_accepted():
    inputs, outputs = _lstm()
    graph = runtime.load_model(one_op_model(LSTM, inputs, outputs, OPTIONS))
    assert [n.op_type for n in graph.nodes] == [LSTM]


def test_a_missing_weight_is_named():
    inputs, outputs = _lstm()
    inputs[2] = OMITTED
    refused(inputs, outputs, OPTIONS, r"input 2 \(input_to_forget_weights\) is missing")


def test_a_coupled_input_gate_is_refused():
    inputs, outputs = _lstm()
    inputs[1] = inputs[5] = inputs[12] = OMITTED
    refused(inputs, outputs, OPTIONS, r"input 1 \(input_to_input_weights\) is missing; .*CIFG")


def test_a_wrongly_shaped_recurrent_weight_is_named():
    inputs, outputs = _lstm()
    w = inputs[6]
    inputs[6] = dataclasses.replace(w, shape=(4, 5), data=np.zeros((4, 5), np.int8))
    refused(inputs, outputs, OPTIONS, r"input 6 \(recurrent_to_forget_weights\) has shape \[4, 5\]; accepted: \[4, 4\]")


def test_projection_and_peephole_are_refused():
    inputs, outputs = _lstm(np.float32)
    inputs[16] = Tensor((4, 4), np.float32, data=np.zeros((4, 4), np.float32))
    refused(inputs, outputs, OPTIONS, r"input 16 \(projection_weights\) is given: the projection LSTM is not supported")
    inputs, outputs = _lstm(np.float32)
    inputs[10] = Tensor((4,), np.float32, data=np.zeros(4, np.float32))
    refused(inputs, outputs, OPTIONS, r"input 10 \(cell_to_forget_weights\) is given: the peephole LSTM")


def test_unsupported_options_are_named():
    inputs, outputs = _lstm()
    refused(inputs, outputs, {**OPTIONS, "fused_activation_function": "RELU"}, r"'RELU'; accepted: 'TANH'")


def test_states_must_be_variable_and_well_typed():
    inputs, outputs = _lstm()
    inputs[19] = dataclasses.replace(inputs[19], variable=False, data=np.zeros((2, 4), np.int16))
    refused(inputs, outputs, OPTIONS, r"input 19 \(cell_state\) must be a variable tensor")
    inputs, outputs = _lstm()
    inputs[19] = dataclasses.replace(inputs[19], quant=q(0.001))
    refused(inputs, outputs, OPTIONS, r"input 19 \(cell_state\) has scale .*; accepted: a power-of-two scale")
    inputs, outputs = _lstm()
    inputs[19] = dataclasses.replace(inputs[19], dtype=np.int8)
    refused(inputs, outputs, OPTIONS, r"input 19 \(cell_state\) is int8; accepted here: int16")


def test_per_channel_and_mixed_type_lstms_are_refused():
    inputs, outputs = _lstm()
    w = inputs[3]
    inputs[3] = dataclasses.replace(w, quant=q(np.full(4, 0.02), np.zeros(4, np.int64), 0))
    refused(inputs, outputs, OPTIONS, r"input 3 \(input_to_cell_weights\) has 4 per-channel scales; accepted: one")
    inputs, outputs = _lstm()
    inputs[0] = dataclasses.replace(inputs[0], dtype=np.int16)  # int16 activations take int64 biases
    refused(inputs, outputs, OPTIONS, r"input 12 \(input_gate_bias\) is int32; accepted here: int64")
    inputs, outputs = _lstm()
    inputs[0] = dataclasses.replace(inputs[0], dtype=np.uint8)
    refused(inputs, outputs, OPTIONS, r"input 0 \(input\) is uint8; accepted: float32, int8 .* or int16")


def test_an_lstm_with_too_few_inputs_is_named():
    inputs, outputs = _lstm()
    refused(inputs[:20], outputs, OPTIONS, r"20 inputs and 1 outputs; accepted: the schema's 24 inputs")


def _svdf(rank=2, state_shape=(2, 40)):
    return [
        Tensor((2, 12), np.float32),
        Tensor((8, 12), np.float32, data=np.zeros((8, 12), np.float32)),
        Tensor((8, 5), np.float32, data=np.zeros((8, 5), np.float32)),
        Tensor((8 // rank,), np.float32, data=np.zeros(8 // rank, np.float32)),
        Tensor(state_shape, np.float32, variable=True),
    ], [Tensor((2, 8 // rank), np.float32)]


def test_svdf_shapes_and_rank_are_checked():
    inputs, outputs = _svdf(state_shape=(2, 39))
    refused(
        inputs, outputs, {"rank": 2}, r"input 4 \(activation_state\) has shape \[2, 39\]; accepted: \[2, 40\]", "SVDF"
    )
    inputs, outputs = _svdf(rank=1)
    refused(inputs, outputs, {"rank": 3}, r"rank 3 does not divide the 8 filters", "SVDF")


def test_the_cli_exits_2_naming_the_operator(tmp_path):
    from typer.testing import CliRunner

    from app.cli import app

    inputs, outputs = _lstm()
    inputs[2] = OMITTED
    path = tmp_path / "lstm.tflite"
    path.write_bytes(one_op_model(LSTM, inputs, outputs, OPTIONS))
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 2, result.output
    assert "operator 0 (UNIDIRECTIONAL_SEQUENCE_LSTM): input 2 (input_to_forget_weights) is missing" in result.output
    assert "Traceback" not in result.output


def test_rest_refuses_the_upload_with_422_naming_the_operator_and_plans_a_good_one(client):
    inputs, outputs = _lstm()
    good = one_op_model(LSTM, inputs, outputs, OPTIONS)
    inputs[16] = Tensor((4, 4), np.int8, q(0.01), np.zeros((4, 4), np.int8))
    bad = one_op_model(LSTM, inputs, outputs, OPTIONS)
    r = client.post("/api/v1/models", files={"file": ("lstm.tflite", bad, "application/octet-stream")})
    assert r.status_code == 422, r.text
    assert "operator 0 (UNIDIRECTIONAL_SEQUENCE_LSTM): input 16 (projection_weights) is given" in r.json()["detail"]
    r = client.post("/api/v1/models", files={"file": ("lstm.tflite", good, "application/octet-stream")})
    assert r.status_code == 201, r.text
    planned = client.post(f"/api/v1/models/{r.json()['id']}/plans", json={"strategies": ["greedy_by_size"]})
    assert planned.status_code == 200, planned.text
