"""The compiled 2-D MaxPool (`runtime.kernels.jit_pool`) against onnxruntime and onnx.reference:
seeded windows (strides, dilations, pads, ceil_mode), NaN and infinities, ResNet's 3x3 stride-2
pool run over its own input without a chunk, and geometries whose rows would overwrite
input still to be read, which go through the plane-wise chunks instead."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import TensorMeta, get_kernel, jit_pool, pool, pool_windows
from tests.runtime.kernels.harness import close, one_node, run_against_reference, run_kernel, run_ort

needs_jit = pytest.mark.skipif(jit_pool.max_pool is None, reason="compiled loops off or numba missing")


def _window(rng: np.random.Generator) -> dict:
    kernel = [int(k) for k in rng.integers(1, 5, 2)]
    return {
        "kernel_shape": kernel,
        "strides": [int(s) for s in rng.integers(1, 4, 2)],
        "dilations": [int(d) for d in rng.integers(1, 3, 2)],
        "pads": [int(rng.integers(0, k)) for k in kernel * 2],
        "ceil_mode": int(rng.integers(0, 2)),
    }


@pytest.fixture
def compiled_only(monkeypatch):
    """Fail if MaxPool leaves the compiled loop for numpy's route."""

    def numpy_route(*_, **__):
        raise AssertionError("numpy's route taken")

    monkeypatch.setattr(pool_windows, "reduce_windows", numpy_route)


@needs_jit
@pytest.mark.parametrize("seed", range(16))
def test_compiled_max_pool_against_onnxruntime(seed, compiled_only):
    rng = np.random.default_rng(1500 + seed)
    attrs = _window(rng)
    x = rng.standard_normal((2, 3, *rng.integers(9, 20, 2))).astype(np.float32)
    model = one_node("MaxPool", {"x": x}, opset=12, **attrs)
    expected = run_ort(model, {"x": x})
    close(run_kernel(model, [x], like=expected), expected)


@needs_jit
def test_compiled_max_pool_keeps_nan_and_infinities_as_numpys_route(monkeypatch):
    # NaN is left open by the spec (onnx.reference skips it, onnxruntime's result depends on
    # where it lies in the window): both routes propagate it, as np.maximum does.
    x = np.random.default_rng(7).standard_normal((1, 2, 8, 8)).astype(np.float32)
    x[0, 0, 3, 4], x[0, 0, 0, 1], x[0, 1, 0, 0] = np.nan, np.nan, np.inf
    x[0, 1, 5:, 5:] = -np.inf  # a window of -inf alone
    model = one_node("MaxPool", {"x": x}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    like = run_against_reference(model, {"x": x})[1]
    compiled = run_kernel(model, [x], like=like)[0]
    monkeypatch.setattr(jit_pool, "max_pool", None)
    numpy_route = run_kernel(model, [x], like=like)[0]
    np.testing.assert_array_equal(compiled, numpy_route)
    assert np.isnan(compiled[0, 0]).sum() == 4 and compiled[0, 1, 3, 3] == -np.inf


def _over_input(x: np.ndarray, attrs: dict, want_shape: tuple[int, ...]) -> np.ndarray:
    """MaxPool called with its output from its input's first byte, as a session plans ResNet's."""
    kernel = get_kernel("MaxPool")
    metas = [TensorMeta(x.shape, x.dtype)], [TensorMeta(want_shape, x.dtype), None]
    ws = np.empty(max(1, kernel.workspace(*metas, **attrs)), np.uint8)  # type: ignore[misc]
    memory = x.copy()
    y = memory.reshape(-1)[: int(np.prod(want_shape))].reshape(want_shape)
    kernel.fn(memory, out=(y, None), ws=ws, **attrs)
    return y


@needs_jit
def test_resnet_pool_runs_over_its_input_without_a_chunk(compiled_only):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    x = np.random.default_rng(8).standard_normal((2, 6, 16, 16)).astype(np.float32)
    want = run_against_reference(one_node("MaxPool", {"x": x}, **attrs), {"x": x})[1][0]
    x_meta, y_meta = TensorMeta(x.shape, x.dtype), TensorMeta(want.shape, x.dtype)
    assert pool._rows_in_order(attrs, [x_meta], y_meta)
    # no chunk of scratch added to the kernel's own workspace
    own = pool.route_workspace("MaxPool")([x_meta], [y_meta, None], **attrs)
    assert get_kernel("MaxPool").workspace([x_meta], [y_meta, None], **attrs) == own  # type: ignore[misc]
    np.testing.assert_array_equal(_over_input(x, attrs, want.shape), want)


@needs_jit
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},  # stride 1 under a top pad: row oy lands on input row oy
        {"kernel_shape": [2, 2], "strides": [1, 1], "dilations": [2, 2]},
    ],
)
def test_rows_that_would_overwrite_unread_input_go_through_chunks(attrs):
    x = np.random.default_rng(9).standard_normal((1, 4, 10, 10)).astype(np.float32)
    want = run_against_reference(one_node("MaxPool", {"x": x}, **attrs), {"x": x})[1][0]
    x_meta, y_meta = TensorMeta(x.shape, x.dtype), TensorMeta(want.shape, x.dtype)
    direct = pool._rows_in_order(attrs, [x_meta], y_meta)
    if "dilations" not in attrs:
        assert not direct
    np.testing.assert_array_equal(_over_input(x, attrs, want.shape), want)


@needs_jit
@pytest.mark.parametrize("kernel", [2, 3, 4, 5])
@pytest.mark.parametrize("width", [15, 16])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_column_stride_two_against_onnxruntime(kernel, width, ceil_mode, compiled_only):
    # the even and odd columns' route, spans of either parity
    x = np.random.default_rng(kernel * width).standard_normal((1, 3, 11, width)).astype(np.float32)
    attrs = {
        "kernel_shape": [3, kernel],
        "strides": [1, 2],
        "pads": [1, kernel // 2, 0, kernel - 1],
        "ceil_mode": ceil_mode,
    }
    model = one_node("MaxPool", {"x": x}, opset=12, **attrs)
    expected = run_ort(model, {"x": x})
    close(run_kernel(model, [x], like=expected), expected)
