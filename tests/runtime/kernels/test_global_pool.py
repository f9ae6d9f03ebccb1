"""GlobalAveragePool as a matrix-vector product (floats) or a reduction (other types), against
onnx.reference: batches of 1 to 3, 1-D to 3-D maps, float32, float64 and float16."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.harness import close, one_node, run_against_reference


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(1, 7, 13), (3, 5, 9, 11), (2, 4, 3, 5, 6), (1, 1, 1, 1)])
def test_global_average_pool_against_reference(shape, dtype):
    x = np.random.default_rng(len(shape) * 10 + shape[0]).standard_normal(shape).astype(dtype) * 3 + 1
    model = one_node("GlobalAveragePool", {"x": x})
    got, expected = run_against_reference(model, {"x": x})
    # float16 sums in float16 on both sides, in different orders: a half-precision tolerance.
    close(got, expected, **({"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {}))
