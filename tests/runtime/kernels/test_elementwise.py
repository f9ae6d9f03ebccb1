"""Elementwise, activation, logic, reduction, generator and tensor-manipulation kernels against
onnx's own backend node test cases (expected outputs computed by onnx), one test per case; and
the kernel contract on one case per op: every output element written, nothing returned, and
right when output 0 is the memory of an input it may overwrite."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from runtime.kernels import TensorMeta, attributes_of, get_kernel, kernels
from tests.runtime.kernels.harness import backend_cases, run_kernel

# The modules of this family; every op they register is tested below.
MODULES = ("activation", "elementwise", "logic", "reduce", "shape_ops", "tensor_ops", "generators")
OPS = sorted(op for op, k in kernels().items() if k.fn.__module__.rsplit(".", 1)[-1] in MODULES)

# Ops a model zoo network commonly needs from this family.
REQUIRED = (
    "Relu LeakyRelu PRelu Sigmoid Tanh Clip HardSigmoid HardSwish Erf Gelu Softmax LogSoftmax Add Sub Mul Div Pow "
    "Sqrt Reciprocal Sum Max Min Neg Exp Log Abs Concat Split Slice Gather Reshape Flatten Transpose Squeeze "
    "Unsqueeze Shape Size Constant ConstantOfShape Cast Identity Dropout ReduceMean ReduceSum ReduceMax Expand "
    "Where Equal Less Greater Not And Pad Range Tile"
)

# Cases a kernel cannot pass, by exact name, with the reason.
_RANDOM_MASK = "training-mode mask is random; memplan's generator is not onnx's"
SKIPS = {
    "test_training_dropout": _RANDOM_MASK,
    "test_training_dropout_mask": _RANDOM_MASK,
    "test_training_dropout_default": _RANDOM_MASK,
    "test_training_dropout_default_mask": _RANDOM_MASK,
}


def _skip_reason(name: str) -> str | None:
    return SKIPS.get(name)


def _array(value):
    # A few case families (Cast, CastLike) store their data as TensorProtos, which the
    # harness may have wrapped in a 0-d object array.
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype == object:
        value = value.item()
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return value


def _collect():
    params = []
    for op in OPS:
        for name, model, inputs, expected in backend_cases(op):
            inputs = [None if x is None else _array(x) for x in inputs]
            expected = [np.asarray(_array(e)) for e in expected]
            reason = _skip_reason(name)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(model, inputs, expected, id=f"{op}-{name}", marks=marks))
    return params


CASES = _collect()


def assert_matches(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "V" or want.dtype.name.startswith("float8"):
        # bfloat16, float8 and 4-bit types (ml_dtypes): every value is exact in float32.
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    elif np.issubdtype(want.dtype, np.inexact):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("model", "inputs", "expected"), CASES)
def test_backend_node_case(model, inputs, expected):
    got = run_kernel(model, inputs, like=expected)
    for g, e in zip(got, expected, strict=True):
        assert_matches(g, e)


def test_every_listed_op_is_registered():
    missing = [op for op in REQUIRED.split() if get_kernel(op) is None]
    assert not missing, f"no kernel for {missing}"


def _run_raw(model, inputs, expected, fill, alias=None):
    """Call the kernel's function directly (not through `call`, which drops the return
    value): outputs pre-filled with `fill`, inputs read-only. With `alias` = i, output 0 is
    input i's own buffer, as when the planner reuses a dying input in place."""
    node = model.graph.node[0]
    k = get_kernel(node.op_type)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    outputs = [np.full(e.shape, fill, dtype=e.dtype) if e.dtype != object else np.empty_like(e) for e in expected]
    frozen = []
    for x in inputs:
        if x is not None:
            x = np.array(x)
            x.flags.writeable = False
        frozen.append(x)
    if alias is not None:
        outputs[0] = np.array(inputs[alias])
        frozen[alias] = outputs[0].view()
        frozen[alias].flags.writeable = False
    attrs = attributes_of(node)
    extra = {"opset": opset} if k.takes_opset else {}
    if k.workspace is not None:
        metas = [None if x is None else TensorMeta(x.shape, x.dtype) for x in frozen]
        nbytes = k.workspace(metas, [TensorMeta(o.shape, o.dtype) for o in outputs], **attrs)
        extra["ws"] = np.zeros(nbytes, dtype=np.uint8)
    result = k.fn(*frozen, out=tuple(outputs) if k.multi_output else outputs[0], **attrs, **extra)
    return result, outputs


def _first_case_per_op():
    seen = {}
    for param in CASES:
        op = param.id.split("-", 1)[0]
        if op not in seen and not param.marks:
            seen[op] = pytest.param(*param.values, id=op)
    return list(seen.values())


@pytest.mark.parametrize(("model", "inputs", "expected"), _first_case_per_op())
def test_kernel_writes_every_output_element_and_returns_none(model, inputs, expected):
    before = [None if x is None else np.array(x) for x in inputs]
    # Two different fills: an element the kernel forgot would keep one of them.
    for fill in (0, 1):
        result, got = _run_raw(model, inputs, expected, fill)
        assert result is None
        for g, e in zip(got, expected, strict=True):
            assert_matches(g, e)
    for x, b in zip(inputs, before, strict=True):
        if x is not None:
            np.testing.assert_array_equal(x, b)


def _aliasable(param):
    """(case, input index) pairs where the input could hold output 0 in place."""
    model, inputs, expected = param.values
    k = get_kernel(model.graph.node[0].op_type)
    if param.marks or k.multi_output:
        return []
    return [
        pytest.param(model, inputs, expected, i, id=f"{param.id}-input{i}")
        for i, x in enumerate(inputs)
        if isinstance(x, np.ndarray) and x.shape == expected[0].shape and x.dtype == expected[0].dtype != object
    ]


@pytest.mark.parametrize(("model", "inputs", "expected", "index"), [a for p in CASES for a in _aliasable(p)])
def test_kernel_is_correct_in_place(model, inputs, expected, index):
    _, got = _run_raw(model, inputs, expected, 0, alias=index)
    assert_matches(got[0], expected[0])
