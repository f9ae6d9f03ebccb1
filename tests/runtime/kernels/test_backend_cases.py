"""Convolution, matrix-product, normalisation, pooling, resize and recurrent kernels against
onnx's own backend node cases, and the workspace contract: the same results with a planned
workspace of exactly the declared size full of garbage, and with none at all.

Seeded random attribute combinations of each family are in test_conv, test_pool, test_matmul,
test_norm, test_resize and test_rnn; elementwise and tensor kernels' cases in test_elementwise.
"""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import get_kernel
from tests.runtime.kernels.harness import backend_cases, run_kernel, run_with_workspace

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


WORKSPACE_OPS = [op for op in OPS if get_kernel(op).workspace is not None]


@pytest.mark.parametrize(("model", "inputs", "expected"), _backend_params(WORKSPACE_OPS))
@pytest.mark.parametrize("mode", ["none", "exact"])
def test_workspace_or_none_give_the_same_result(model, inputs, expected, mode):
    got, _ = run_with_workspace(model, inputs, expected, mode)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
