"""MaxPool and AveragePool beyond onnx's backend cases (those are in test_backend_cases).

Seeded random attributes and ceil_mode against onnx.reference or onnxruntime; a window over the
whole image. MaxPool (without indices) and AveragePool reduce one spatial axis at a time when
that needs no more workspace than the tap-by-tap path (padded pools), the last axis over the
flattened image when its border columns are few. Those maps are wide enough for that path, and
the attributes cover strides, dilations, explicit and SAME pads and ceil_mode, in 1-D to 3-D,
against onnxruntime; each case runs as chosen and with the axis-by-axis path forced."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import TensorMeta, get_kernel, pool_routes
from runtime.kernels.pool_windows import dense_first, separable_fits
from runtime.kernels.window import window_geometry
from tests.runtime.kernels.harness import close, one_node, random_window, run_against_reference, run_kernel, run_ort


def _attrs(rng: np.random.Generator, rank: int) -> dict:
    kernel = [int(k) for k in rng.integers(1, 5, rank)]
    attrs: dict = {
        "kernel_shape": kernel,
        "strides": [int(s) for s in rng.integers(1, 4, rank)],
        "dilations": [int(d) for d in rng.integers(1, 3, rank)],
    }
    if rng.random() < 0.25:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER"]))
        # onnxruntime refuses SAME pads with dilations, or with a stride beyond the kernel.
        attrs["dilations"] = [1] * rank
        attrs["strides"] = [min(s, k) for s, k in zip(attrs["strides"], kernel, strict=True)]
    else:
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
        attrs["ceil_mode"] = int(rng.integers(0, 2))
    return attrs


def _input(rng: np.random.Generator, rank: int) -> np.ndarray:
    sizes = rng.integers(12, 24 if rank < 3 else 12, rank) if rank < 3 else rng.integers(8, 12, rank)
    return rng.standard_normal((2, 3, *sizes)).astype(np.float32)


@pytest.fixture(params=["chosen", "separable"])
def path(request, monkeypatch):
    if request.param == "separable":
        monkeypatch.setattr("runtime.kernels.pool_windows.separable_fits", lambda *_: True)
    pool_routes.forget()  # the routes chosen so far were chosen without it
    yield request.param
    pool_routes.forget()


@pytest.mark.parametrize("seed", range(24))
def test_max_pool_separable_against_onnxruntime(seed, path):
    rng = np.random.default_rng(900 + seed)
    rank = 1 + seed % 3
    attrs, x = _attrs(rng, rank), _input(rng, rank)
    model = one_node("MaxPool", {"x": x}, opset=12, **attrs)
    expected = run_ort(model, {"x": x})
    close(run_kernel(model, [x], like=expected), expected)


@pytest.mark.parametrize("seed", range(24))
def test_average_pool_separable_against_onnxruntime(seed, path):
    rng = np.random.default_rng(950 + seed)
    rank = 1 + seed % 3
    attrs, x = _attrs(rng, rank), _input(rng, rank)
    attrs["count_include_pad"] = int(rng.integers(0, 2))
    model = one_node("AveragePool", {"x": x}, opset=19, **attrs)
    expected = run_ort(model, {"x": x})
    close(run_kernel(model, [x], like=expected), expected)


def test_the_flattened_path_is_taken_by_common_pools():
    # ResNet's stem pool and a 3x3 stride-1 pool (Inception's branches) take it; a 7x7 pool
    # over a 7x7 map (all border) does not.
    x = (1, 64, 112, 112)
    assert dense_first(x, window_geometry(x, (1, 64, 56, 56), [3, 3], "NOTSET", [1, 1, 1, 1], [2, 2], None))
    x = (1, 256, 28, 28)
    assert dense_first(x, window_geometry(x, x, [3, 3], "NOTSET", [1, 1, 1, 1], None, None))
    x = (1, 2048, 7, 7)
    assert not dense_first(x, window_geometry(x, (1, 2048, 1, 1), [7, 7], "NOTSET", None, None, None))


def test_axis_by_axis_only_where_it_takes_no_more_workspace():
    # A padded pool already copies its image: the intermediate fits in that space. An unpadded
    # pool reads the input in place, and a full-size intermediate would grow the arena.
    f32 = np.dtype(np.float32)
    x = (1, 64, 112, 112)
    assert separable_fits(x, window_geometry(x, (1, 64, 56, 56), [3, 3], "NOTSET", [1, 1, 1, 1], [2, 2], None), f32)
    x = (1, 64, 111, 111)
    assert not separable_fits(x, window_geometry(x, (1, 64, 55, 55), [3, 3], "NOTSET", None, [2, 2], None), f32)


def _random_pool(rng: np.random.Generator, rank: int) -> dict:
    kernel, attrs = random_window(rng, rank)
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


def _reference_pool(op_type: str, x: np.ndarray, **attrs) -> np.ndarray:
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", f, x.shape)], [helper.make_tensor_value_info("y", f, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("op_type", ["AveragePool", "MaxPool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [7, 7]},  # the whole image: one reduction per channel
        {"kernel_shape": [7, 7], "pads": [1, 1, 1, 1]},  # padded: the general path
        {"kernel_shape": [6, 7]},  # smaller than the image: the general path
        {"kernel_shape": [7, 7], "count_include_pad": 1},
    ],
)
def test_pool_over_the_whole_image_matches_reference(op_type: str, attrs: dict) -> None:
    if op_type == "MaxPool" and "count_include_pad" in attrs:
        pytest.skip("count_include_pad is an AveragePool attribute")
    x = np.random.default_rng(3).standard_normal((2, 5, 7, 7)).astype(np.float32)
    want = _reference_pool(op_type, x, **attrs)
    k = get_kernel(op_type)
    metas = [TensorMeta(x.shape, x.dtype)]
    nbytes = k.workspace(metas, [TensorMeta(want.shape, want.dtype)], **attrs)
    ws = np.empty(nbytes, np.uint8) if nbytes else None
    out = np.full_like(want, np.nan)
    k.fn(x, out=(out,) if k.multi_output else out, ws=ws, **attrs)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
