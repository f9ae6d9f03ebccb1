"""LSTM, GRU and RNN on seeded random shapes, directions and options, and their activations,
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.harness import close, one_node, run_kernel, run_ort, run_with_workspace


def _recurrent_case(op: str, seed: int) -> tuple[dict, dict, list]:
    """Random feeds and attributes for LSTM/GRU/RNN covering directions, layouts, optional
    inputs, sequence lengths, clip and non-default activations."""
    rng = np.random.default_rng(800 + seed)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    direction = ["forward", "reverse", "bidirectional"][seed % 3]
    dirs = 2 if direction == "bidirectional" else 1
    layout = (seed // 3) % 2
    seq, batch, size, hidden = 4, int(rng.choice([3, 4])), int(rng.integers(1, 5)), int(rng.integers(1, 5))
    x = rng.standard_normal((seq, batch, size) if layout == 0 else (batch, seq, size)).astype(np.float32)
    state_shape = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)

    def maybe(shape, p=0.6):
        return rng.standard_normal(shape).astype(np.float32) if rng.random() < p else None

    feeds = {
        "x": x,
        "w": rng.standard_normal((dirs, gates * hidden, size)).astype(np.float32),
        "r": rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32),
        "b": maybe((dirs, 2 * gates * hidden)),
        "lens": rng.integers(1, seq + 1, batch).astype(np.int32) if seed % 2 else None,
        "h0": maybe(state_shape),
    }
    if op == "LSTM":
        feeds["c0"] = maybe(state_shape)
        feeds["p"] = maybe((dirs, 3 * hidden), p=1.0 if seed % 3 == 1 else 0.5)  # seed 1: with clip
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if seed % 4 == 1:
        attrs["clip"] = 1.5
    if op == "GRU":
        attrs["linear_before_reset"] = int(rng.integers(0, 2))
    if op == "LSTM" and seed % 5 == 2:
        attrs["input_forget"] = 1
    if seed % 4 == 3:
        choices = {"LSTM": ["HardSigmoid", "Softsign", "Relu"], "GRU": ["Sigmoid", "LeakyRelu"], "RNN": ["Elu"]}[op]
        attrs["activations"] = choices * dirs
        attrs["activation_alpha"] = [0.3] * dirs
    out_types = [np.float32] * (3 if op == "LSTM" else 2)
    return feeds, attrs, out_types


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("seed", range(12))
def test_recurrent_random_against_onnxruntime(op, seed):
    # onnx.reference ignores sequence_lens, clip and activations: onnxruntime is the oracle.
    # It runs only layout 0: batch-major cases are checked against it on transposed tensors.
    feeds, attrs, out_types = _recurrent_case(op, seed)
    model = one_node(op, feeds, n_outputs=len(out_types), opset=14, out_types=out_types, **attrs)
    if attrs["layout"] == 0:
        expected = run_ort(model, feeds)
    else:
        swap = {k: None if v is None else (v.swapaxes(0, 1) if k in ("x", "h0", "c0") else v) for k, v in feeds.items()}
        time_major = one_node(
            op, swap, n_outputs=len(out_types), opset=14, out_types=out_types, **{**attrs, "layout": 0}
        )
        y, *states = run_ort(time_major, swap)
        expected = [y.transpose(2, 0, 1, 3)] + [s.swapaxes(0, 1) for s in states]
    inputs = list(feeds.values())
    close(run_kernel(model, inputs, like=expected), expected, rtol=1e-4, atol=1e-5)
    got, _ = run_with_workspace(model, inputs, expected, "none")
    close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("activation", "alpha", "beta"),
    [
        ("Tanh", None, None),
        ("Sigmoid", None, None),
        ("Relu", None, None),
        ("LeakyRelu", 0.2, None),
        ("ThresholdedRelu", 0.3, None),
        ("ScaledTanh", 0.7, 1.3),
        ("HardSigmoid", 0.3, 0.4),
        ("Elu", 0.8, None),
        ("Softsign", None, None),
        ("Softplus", None, None),
        ("Affine", 0.5, 0.25),
    ],
)
def test_rnn_activations_against_onnxruntime(activation, alpha, beta):
    rng = np.random.default_rng(9)
    feeds = {
        "x": rng.standard_normal((3, 2, 3)).astype(np.float32),
        "w": rng.standard_normal((2, 4, 3)).astype(np.float32),
        "r": rng.standard_normal((2, 4, 4)).astype(np.float32),
    }
    attrs: dict = {"hidden_size": 4, "direction": "bidirectional", "activations": [activation] * 2}
    if alpha is not None:
        attrs["activation_alpha"] = [alpha] * 2
    if beta is not None:
        attrs["activation_beta"] = [beta] * 2
    model = one_node("RNN", feeds, n_outputs=2, opset=14, **attrs)
    expected = run_ort(model, feeds)
    close(run_kernel(model, list(feeds.values()), like=expected), expected)


def test_lstm_clip_with_peepholes_against_onnxruntime():
    # Large pre-activations and a tight clip: every gate, the cell candidate included, is clipped.
    rng = np.random.default_rng(5)
    hidden = 3
    feeds = {
        "x": rng.standard_normal((4, 2, 3)).astype(np.float32) * 2,
        "w": rng.standard_normal((1, 4 * hidden, 3)).astype(np.float32),
        "r": rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32),
        "b": None,
        "lens": None,
        "h0": None,
        "c0": None,
        "p": rng.standard_normal((1, 3 * hidden)).astype(np.float32),
    }
    model = one_node("LSTM", feeds, n_outputs=3, opset=14, out_types=[np.float32] * 3, hidden_size=hidden, clip=0.5)
    expected = run_ort(model, feeds)
    close(run_kernel(model, list(feeds.values()), like=expected), expected)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("lens", [None, [9, 4]])
def test_recurrent_with_garbage_workspace_against_onnxruntime(op, linear_before_reset, lens):
    # Odd sizes, batch 2, both directions, initial states, and a workspace full of NaN bytes:
    # nothing may be read from it before it is written.
    rng = np.random.default_rng(linear_before_reset)
    gates, hidden, size, seq = (4 if op == "LSTM" else 3), 33, 7, 9
    feeds = {
        "x": rng.standard_normal((seq, 2, size)).astype(np.float32),
        "w": rng.standard_normal((2, gates * hidden, size)).astype(np.float32) * 0.3,
        "r": rng.standard_normal((2, gates * hidden, hidden)).astype(np.float32) * 0.3,
        "b": rng.standard_normal((2, 2 * gates * hidden)).astype(np.float32),
        "lens": None if lens is None else np.array(lens, np.int32),
        "h0": rng.standard_normal((2, 2, hidden)).astype(np.float32),
    }
    attrs = {"hidden_size": hidden, "direction": "bidirectional"}
    if op == "LSTM":
        feeds["c0"] = rng.standard_normal((2, 2, hidden)).astype(np.float32)
    else:
        attrs["linear_before_reset"] = linear_before_reset
    n = 3 if op == "LSTM" else 2
    model = one_node(op, feeds, n_outputs=n, opset=14, out_types=[np.float32] * n, **attrs)
    expected = run_ort(model, feeds)
    got, _ = run_with_workspace(model, list(feeds.values()), expected, "exact")
    close(got, expected, rtol=1e-4, atol=1e-5)
