"""Convolution, matrix-product, normalisation and pooling kernels against onnx's oracles.

Three kinds of evidence: onnx's own backend node cases for every op; seeded random
attribute combinations against onnx.reference (or onnxruntime where the reference is
known to be wrong); and the workspace contract (same results with a planned workspace of
exactly the declared size full of garbage, and with none at all).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest

from runtime.kernels import TensorMeta, attributes_of, call, get_kernel
from tests.kernel_harness import backend_cases, close, one_node, run_against_reference, run_kernel, run_ort

OPS = [
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "BatchNormalization",
    "LayerNormalization",
    "InstanceNormalization",
    "LRN",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Resize",
    "Einsum",
    "LSTM",
    "GRU",
    "RNN",
    "RMSNormalization",
    "GroupNormalization",
    "MeanVarianceNormalization",
    "LpNormalization",
    "LpPool",
    "Upsample",
    "MatMulInteger",
    "ConvInteger",
]

# Backend cases a kernel does not pass, with the reason.
SKIPS: dict[str, str] = {}


def _backend_params(ops: list[str]) -> list:
    params = []
    for op in ops:
        for name, model, inputs, expected in backend_cases(op):
            marks = [pytest.mark.skip(reason=SKIPS[name])] if name in SKIPS else []
            params.append(pytest.param(model, inputs, expected, id=name, marks=marks))
    return params


BACKEND = _backend_params(OPS)


@pytest.mark.parametrize(("model", "inputs", "expected"), BACKEND)
def test_backend_node_case(model, inputs, expected):
    got = run_kernel(model, inputs, like=expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)


def test_every_op_has_backend_cases():
    covered = {p.values[0].graph.node[0].op_type for p in BACKEND}
    assert covered == set(OPS)


# --- workspace contract --------------------------------------------------------------


def _run_with_ws(model: onnx.ModelProto, inputs: list, like: list, mode: str) -> tuple[list[np.ndarray], int]:
    """Run the node with no workspace ("none") or exactly the declared bytes of garbage ("exact")."""
    node = model.graph.node[0]
    k = get_kernel(node.op_type)
    attrs = attributes_of(node)
    shapes = iter(like)
    outputs = []  # one slot per node output, None for the omitted ones
    for name in node.output:
        e = next(shapes) if name else None
        outputs.append(None if e is None else np.full(e.shape, 7, dtype=e.dtype))
    size = 0
    ws = None
    if mode == "exact" and k.workspace is not None:
        metas_in = [None if x is None else TensorMeta(tuple(x.shape), x.dtype) for x in inputs]
        metas_out = [None if o is None else TensorMeta(tuple(o.shape), o.dtype) for o in outputs]
        size = k.workspace(metas_in, metas_out, **attrs)
        ws = np.full(size, 0xFF, dtype=np.uint8)  # NaN in float views: scratch must not be read before written
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    call(k, inputs, outputs, ws, attrs, opset)
    return [o for o in outputs if o is not None], size


WORKSPACE_OPS = [op for op in OPS if get_kernel(op).workspace is not None]


@pytest.mark.parametrize(("model", "inputs", "expected"), _backend_params(WORKSPACE_OPS))
@pytest.mark.parametrize("mode", ["none", "exact"])
def test_workspace_or_none_give_the_same_result(model, inputs, expected, mode):
    got, _ = _run_with_ws(model, inputs, expected, mode)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)


# --- randomised attribute combinations -------------------------------------------------------------


def _random_window(rng: np.random.Generator, rank: int, allow_auto_pad: bool = True) -> dict:
    kernel = [int(k) for k in rng.integers(1, 4, rank)]
    attrs: dict = {
        "strides": [int(s) for s in rng.integers(1, 3, rank)],
        "dilations": [int(d) for d in rng.integers(1, 3, rank)],
    }
    auto_pad = rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]) if allow_auto_pad else "NOTSET"
    if auto_pad == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
    else:
        attrs["auto_pad"] = str(auto_pad)
    return kernel, attrs


@pytest.mark.parametrize("seed", range(40))
def test_conv_random_against_reference(seed):
    rng = np.random.default_rng(seed)
    rank = 3 if seed % 10 == 9 else 1 + seed % 2
    group = int(rng.choice([1, 1, 2, 3]))
    depthwise = seed % 7 == 0
    per_group_in = 1 if depthwise else int(rng.integers(1, 4))
    per_group_out = 1 if depthwise else int(rng.integers(1, 4))
    kernel, attrs = _random_window(rng, rank)
    spatial = [int(s) for s in rng.integers(4, 9 if rank < 3 else 6, rank)]
    x = rng.standard_normal((int(rng.integers(1, 3)), group * per_group_in, *spatial)).astype(np.float32)
    w = rng.standard_normal((group * per_group_out, per_group_in, *kernel)).astype(np.float32)
    b = rng.standard_normal(group * per_group_out).astype(np.float32) if seed % 3 else None
    model = one_node("Conv", {"x": x, "w": w, "b": b}, group=group, **attrs)
    got, expected = run_against_reference(model, {"x": x, "w": w, **({"b": b} if b is not None else {})})
    close(got, expected)


@pytest.mark.parametrize("seed", [0, 3, 7, 14, 21, 22])
def test_conv_in_small_bands_against_reference(seed, monkeypatch):
    # Tiny band budgets force one output row (one channel, depthwise) per im2col band.
    monkeypatch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 64)
    monkeypatch.setattr("runtime.kernels.conv.DEPTHWISE_BLOCK_BYTES", 64)
    test_conv_random_against_reference(seed)


@pytest.mark.parametrize("seed", range(25))
def test_conv_transpose_random_against_onnxruntime(seed):
    # onnx.reference mixes up the weights' axes when group > 1, so onnxruntime is the oracle.
    rng = np.random.default_rng(200 + seed)
    rank = 3 if seed % 8 == 7 else 1 + seed % 2
    group = int(rng.choice([1, 2]))
    kernel = [int(k) for k in rng.integers(1, 4, rank)]
    strides = [int(s) for s in rng.integers(1, 4, rank)]
    dilations = [int(d) for d in rng.integers(1, 3, rank)]
    attrs: dict = {"strides": strides, "dilations": dilations, "group": group}
    spatial = [int(s) for s in rng.integers(2, 6, rank)]
    if seed % 3 == 0:
        # A shape the inputs can reach: the full transposed length less a little padding.
        full = [(n - 1) * st + (k - 1) * d + 1 for n, st, k, d in zip(spatial, strides, kernel, dilations, strict=True)]
        attrs["output_shape"] = [max(1, f - int(rng.integers(0, 2))) for f in full]
    else:
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
        attrs["output_padding"] = [
            int(rng.integers(0, min(s, d))) if max(s, d) > 1 else 0 for s, d in zip(strides, dilations, strict=True)
        ]
    x = rng.standard_normal((int(rng.integers(1, 3)), 2 * group, *spatial)).astype(np.float32)
    w = rng.standard_normal((2 * group, int(rng.integers(1, 3)), *kernel)).astype(np.float32)
    b = rng.standard_normal(w.shape[1] * group).astype(np.float32)
    feeds = {"x": x, "w": w, "b": b}
    model = one_node("ConvTranspose", feeds, **attrs)
    expected = run_ort(model, feeds)
    close(run_kernel(model, [x, w, b], like=expected), expected)


@pytest.mark.parametrize("seed", [0, 1, 4, 7, 9])
def test_conv_transpose_in_small_bands_against_onnxruntime(seed, monkeypatch):
    monkeypatch.setattr("runtime.kernels.window.IM2COL_BLOCK_BYTES", 64)  # one input row per band
    test_conv_transpose_random_against_onnxruntime(seed)


@pytest.mark.parametrize("seed", range(20))
def test_gemm_random_against_reference(seed):
    rng = np.random.default_rng(300 + seed)
    m, k, n = (int(v) for v in rng.integers(1, 7, 3))
    trans_a, trans_b = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c_shape = [(), (n,), (1, n), (m, 1), (m, n), None][seed % 6]
    c = None if c_shape is None else rng.standard_normal(c_shape).astype(np.float32)
    attrs = {"alpha": float(rng.choice([1.0, 0.5, -2.0])), "beta": float(rng.choice([1.0, 0.0, 3.0]))}
    feeds = {"a": a, "b": b, "c": c}
    model = one_node("Gemm", feeds, transA=trans_a, transB=trans_b, **attrs)
    got, expected = run_against_reference(model, {k: v for k, v in feeds.items() if v is not None})
    close(got, expected)


def _random_pool(rng: np.random.Generator, rank: int) -> dict:
    kernel, attrs = _random_window(rng, rank)
    attrs["kernel_shape"] = kernel
    return attrs


@pytest.mark.parametrize("seed", range(30))
def test_max_pool_random_against_reference(seed):
    rng = np.random.default_rng(400 + seed)
    rank = 1 + seed % 2
    attrs = _random_pool(rng, rank)
    attrs["storage_order"] = int(rng.integers(0, 2)) if rank == 2 else 0
    x = rng.standard_normal((2, 3, *rng.integers(5, 9, rank))).astype(np.float32)
    model = one_node("MaxPool", {"x": x}, n_outputs=2, opset=12, out_types=[np.float32, np.int64], **attrs)
    expected = run_ort(model, {"x": x})
    close(run_kernel(model, [x], like=expected), expected)
    if attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID"):
        # onnx.reference's MaxPool derives SAME pads its own (older) way: compare explicit pads only.
        got, reference = run_against_reference(one_node("MaxPool", {"x": x}, opset=12, **attrs), {"x": x})
        close(got, reference)


@pytest.mark.parametrize("seed", range(30))
def test_average_pool_random_against_onnxruntime(seed):
    # onnx.reference shifts windows when ceil_mode adds an overhang; onnxruntime follows the spec.
    rng = np.random.default_rng(500 + seed)
    rank = 1 + seed % 2
    attrs = _random_pool(rng, rank)
    attrs["count_include_pad"] = int(rng.integers(0, 2))
    if "pads" in attrs:
        attrs["ceil_mode"] = int(rng.integers(0, 2))
    x = rng.standard_normal((2, 3, *rng.integers(5, 9, rank))).astype(np.float32)
    model = one_node("AveragePool", {"x": x}, opset=19, **attrs)
    expected = run_ort(model, {"x": x})
    close(run_kernel(model, [x], like=expected), expected)


@pytest.mark.parametrize("seed", range(10))
def test_max_pool_ceil_mode_against_onnxruntime(seed):
    rng = np.random.default_rng(600 + seed)
    kernel = [int(k) for k in rng.integers(2, 4, 2)]
    attrs = {
        "kernel_shape": kernel,
        "strides": [int(s) for s in rng.integers(1, 4, 2)],
        "pads": [int(rng.integers(0, k)) for k in kernel * 2],
        "ceil_mode": 1,
    }
    x = rng.standard_normal((1, 2, *rng.integers(5, 10, 2))).astype(np.float32)
    model = one_node("MaxPool", {"x": x}, n_outputs=2, opset=12, out_types=[np.float32, np.int64], **attrs)
    expected = run_ort(model, {"x": x})
    close(run_kernel(model, [x], like=expected), expected)


@pytest.mark.parametrize("seed", range(24))
def test_resize_random_against_reference(seed):
    rng = np.random.default_rng(700 + seed)
    mode = ["nearest", "linear", "cubic"][seed % 3]
    transform = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"][(seed // 3) % 4]
    x = rng.standard_normal((1, 2, *rng.integers(2, 7, 2))).astype(np.float32)
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    if mode == "nearest":
        attrs["nearest_mode"] = str(rng.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
    roi = np.array([], dtype=np.float32)
    if seed % 2:
        scales = np.array([1, 1, *rng.choice([0.5, 0.75, 1.5, 2.0, 3.0], 2)], dtype=np.float32)
        feeds = {"x": x, "roi": roi, "scales": scales}
    else:
        sizes = np.array([1, 2, *rng.integers(1, 10, 2)], dtype=np.int64)
        feeds = {"x": x, "roi": roi, "scales": np.array([], dtype=np.float32), "sizes": sizes}
    model = one_node("Resize", feeds, opset=19, **attrs)
    got, expected = run_against_reference(model, feeds)
    close(got, expected, rtol=1e-4, atol=1e-5)


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
    got, _ = _run_with_ws(model, inputs, expected, "none")
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


@pytest.mark.parametrize("seed", range(8))
def test_integer_products_random_against_onnxruntime(seed):
    rng = np.random.default_rng(900 + seed)
    if seed % 2:
        a = rng.integers(0, 256, (3, 5), dtype=np.uint8)
        b = rng.integers(0, 256, (5, 4), dtype=np.uint8)
        feeds = {"a": a, "b": b, "az": np.array(rng.integers(0, 256), dtype=np.uint8)}
        feeds["bz"] = rng.integers(0, 256, 4, dtype=np.uint8) if seed % 4 == 1 else np.array(7, dtype=np.uint8)
        model = one_node("MatMulInteger", feeds, opset=10, out_types=[np.int32])
    else:
        group = 1 + seed % 3
        x = rng.integers(0, 256, (1, 2 * group, 6, 5), dtype=np.uint8)
        w = rng.integers(0, 256, (3 * group, 2, 3, 3), dtype=np.uint8)
        feeds = {"x": x, "w": w, "xz": np.array(rng.integers(0, 256), dtype=np.uint8)}
        feeds["wz"] = np.array(rng.integers(0, 256), dtype=np.uint8)
        model = one_node("ConvInteger", feeds, opset=10, out_types=[np.int32], group=group, pads=[1, 0, 1, 2])
    expected = run_ort(model, feeds)
    got = run_kernel(model, list(feeds.values()), like=expected)
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize("seed", range(8))
def test_more_normalisations_and_lp_pools_against_onnxruntime(seed):
    rng = np.random.default_rng(1000 + seed)
    x = rng.standard_normal((2, 6, 5, 4)).astype(np.float32)
    cases = [
        ("LpNormalization", {"x": x}, 1, {"axis": int(rng.integers(-4, 4)), "p": 1 + seed % 2}),
        (
            "MeanVarianceNormalization",
            {"x": x},
            13,
            {"axes": [int(a) for a in sorted(rng.choice(4, 2, replace=False))]},
        ),
        ("GlobalLpPool", {"x": x}, 2, {"p": 1 + seed % 3}),
        ("LpPool", {"x": x}, 18, {"kernel_shape": [2, 3], "p": 1 + seed % 3, "pads": [1, 1, 0, 1], "strides": [1, 2]}),
        (
            "GroupNormalization",
            {"x": x, "s": rng.standard_normal(6).astype(np.float32), "b": rng.standard_normal(6).astype(np.float32)},
            21,
            {"num_groups": [1, 2, 3, 6][seed % 4]},
        ),
        ("RMSNormalization", {"x": x, "s": rng.standard_normal(4).astype(np.float32)}, 23, {}),
    ]
    for op, feeds, opset, attrs in cases:
        model = one_node(op, feeds, opset=opset, **attrs)
        if op == "RMSNormalization":
            got, expected = run_against_reference(model, feeds)  # newer than this onnxruntime
        else:
            expected = run_ort(model, feeds)
            got = run_kernel(model, list(feeds.values()), like=expected)
        close(got, expected, rtol=1e-4, atol=1e-5)


# --- memory outside the arena ---------------------------------------------------------


def _weights(rng: np.random.Generator, *shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {f"w{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}


@pytest.mark.parametrize(
    ("op", "shape", "weights", "attrs"),
    [
        ("Conv", (1, 32, 28, 28), [(32, 32, 3, 3)], {"pads": [1, 1, 1, 1]}),
        ("Conv", (1, 32, 56, 56), [(32, 32, 3, 3)], {"pads": [1, 1, 1, 1]}),
        ("Conv", (2, 32, 28, 28), [(32, 32, 1, 1)], {"strides": [2, 2]}),
        ("Conv", (1, 32, 28, 28), [(32, 1, 3, 3)], {"pads": [1, 1, 1, 1], "group": 32}),
        ("ConvTranspose", (1, 16, 28, 28), [(16, 8, 4, 4)], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", (1, 32, 28, 28), [], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ("AveragePool", (1, 32, 28, 28), [], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", (1, 16, 112, 112), [], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("BatchNormalization", (2, 32, 28, 28), [(32,)] * 4, {}),
        ("LayerNormalization", (4, 64, 256), [(256,), (256,)], {}),
        ("InstanceNormalization", (2, 32, 28, 28), [(32,), (32,)], {}),
        ("LRN", (1, 32, 28, 28), [], {"size": 5}),
        ("Gemm", (256, 512), [(512, 256), (256,)], {}),
        ("MatMul", (8, 128, 256), [(256, 128)], {}),
        ("GlobalAveragePool", (1, 1000, 13, 13), [], {}),
        ("GlobalMaxPool", (1, 1000, 13, 13), [], {}),
    ],
)
def test_kernels_allocate_little_outside_the_workspace(op, shape, weights, attrs):
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), **_weights(rng, *weights)}
    if op == "BatchNormalization":
        feeds["w3"] = np.abs(feeds["w3"])  # a variance
    model = one_node(op, feeds, **attrs)
    expected = run_ort(model, feeds)
    inputs = list(feeds.values())
    _run_with_ws(model, inputs, expected, "exact")  # warm up numpy's caches
    tracemalloc.start()
    try:
        got, size = _run_with_ws(model, inputs, expected, "exact")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    close(got, expected, rtol=1e-3, atol=1e-4)
    # The test's own output and workspace arrays are counted too. Beyond them the kernel may
    # use numpy's ufunc buffers for strided or broadcast operands (kept at 2048 elements by
    # small_ufunc_buffers), never memory that grows with the tensor.
    own = sum(o.nbytes for o in got) + size
    assert peak - own <= 24 * 1024, f"{op} allocated {peak - own} bytes outside out/ws ({own} bytes)"
