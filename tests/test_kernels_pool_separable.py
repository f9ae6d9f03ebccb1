"""MaxPool (without indices) and AveragePool reduce one spatial axis at a time when that needs no
more workspace than the tap-by-tap path (padded pools), the last axis over the flattened image
when its border columns are few. These maps are wide enough for that path, and the attributes
cover strides, dilations, explicit and SAME pads and ceil_mode, in 1-D to 3-D, against
onnxruntime; each case runs as chosen and with the axis-by-axis path forced."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels.pool import dense_first, separable_fits
from runtime.kernels.window import window_geometry
from tests.kernel_harness import close, one_node, run_kernel, run_ort


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
        monkeypatch.setattr("runtime.kernels.pool.separable_fits", lambda *_: True)
    return request.param


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
