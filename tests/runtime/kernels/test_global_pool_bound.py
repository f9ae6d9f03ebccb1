"""GlobalAveragePool bound once per step (`runtime.kernels.global_pool_bound`): apart from and
over its own input (the output from the input's first byte, as the planner places it in
MobileNet heads), one and two images, against numpy's mean; bound only for float32 with
compiled loops, the general call otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import TensorMeta, get_kernel, global_pool_bound, loop_ufunc_buffers


@pytest.mark.parametrize("over", [False, True], ids=["apart", "over-input"])
@pytest.mark.parametrize("shape", [(1, 576, 7, 7), (2, 24, 5, 3), (1, 8, 1, 1)])
def test_bound_means_match_numpy(shape, over):
    kernel = get_kernel("GlobalAveragePool")
    assert kernel is not None and kernel.workspace is not None
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    want = x.mean(axis=(2, 3), keepdims=True, dtype=np.float64)
    metas = [TensorMeta(shape, x.dtype)], [TensorMeta(want.shape, x.dtype)]
    ws = np.zeros(kernel.workspace(*metas), np.uint8)
    bound = kernel.bind(*metas, {}).run
    if global_pool_bound.plane_means is not None:
        assert bound.__qualname__.startswith("bind_global_average"), "not bound apart"
    block = x.reshape(-1).copy()
    source = block.reshape(shape) if over else x
    out = block[: want.size].reshape(want.shape) if over else np.empty(want.shape, np.float32)
    with loop_ufunc_buffers():
        bound(source, out=out, ws=ws)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_other_dtypes_keep_the_general_call():
    kernel = get_kernel("GlobalAveragePool")
    assert kernel is not None
    metas = [TensorMeta((1, 4, 3, 3), np.dtype(np.float64))], [TensorMeta((1, 4, 1, 1), np.dtype(np.float64))]
    bound = kernel.bind(*metas, {}).run
    assert not bound.__qualname__.startswith("bind_global_average")
