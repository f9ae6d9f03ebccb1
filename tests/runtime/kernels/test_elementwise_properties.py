"""Property tests: broadcasting elementwise kernels and reductions on random shapes and
values, each against onnx.reference running the same one-node model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.runtime.kernels.harness import assert_same, one_node_model, run_against_reference

OPSET = 18
SETTINGS = settings(max_examples=30, deadline=None)


def _floats(low=-100.0, high=100.0):
    return st.floats(low, high, allow_nan=False, width=32)


@st.composite
def broadcast_pair(draw, elements=None, dtype=np.float32):
    """Two arrays whose shapes broadcast together (numpy's multidirectional rule)."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=5))
    elements = elements if elements is not None else _floats()
    a = draw(hnp.arrays(dtype, shapes.input_shapes[0], elements=elements))
    b = draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=elements))
    return a, b


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Max", "Min", "Sum", "Equal", "Less", "Greater"])
@SETTINGS
@given(pair=broadcast_pair())
def test_broadcasting_binary_ops(op_type, pair):
    a, b = pair
    assert_same(*run_against_reference(one_node_model(op_type, {"a": a, "b": b}), {"a": a, "b": b}))


_NONZERO_INT = st.integers(-50, 50).filter(lambda v: v != 0)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@SETTINGS
@given(data=st.data())
def test_div_truncates_integers_and_broadcasts(dtype, data):
    elements = _NONZERO_INT if dtype == np.int32 else _floats(0.5, 50.0)
    a, b = data.draw(broadcast_pair(elements=elements, dtype=dtype))
    assert_same(*run_against_reference(one_node_model("Div", {"a": a, "b": b}), {"a": a, "b": b}))


@SETTINGS
@given(data=st.data())
def test_where_broadcasts_three_ways(data):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=4, max_side=4))
    c, x, y = shapes.input_shapes
    feeds = {
        "c": data.draw(hnp.arrays(np.bool_, c)),
        "x": data.draw(hnp.arrays(np.float32, x, elements=_floats())),
        "y": data.draw(hnp.arrays(np.float32, y, elements=_floats())),
    }
    assert_same(*run_against_reference(one_node_model("Where", feeds), feeds))


@st.composite
def tensor_and_axes(draw):
    x = draw(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=5), elements=_floats()))
    axes = draw(st.lists(st.integers(-x.ndim, x.ndim - 1), unique_by=lambda a: a % x.ndim, max_size=x.ndim))
    return x, np.array(axes, dtype=np.int64)


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp"])
@SETTINGS
@given(case=tensor_and_axes(), keepdims=st.sampled_from([0, 1]), noop=st.sampled_from([0, 1]))
def test_reductions(op_type, case, keepdims, noop):
    x, axes = case
    feeds = {"x": x, "axes": axes}
    model = one_node_model(op_type, feeds, keepdims=keepdims, noop_with_empty_axes=noop)
    got, want = run_against_reference(model, feeds)
    # Sums of up to 625 float32 values: allow for a different summation order.
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-3)
    assert got[0].shape == np.asarray(want[0]).shape


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@SETTINGS
@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=5), elements=_floats(-20, 20)),
    data=st.data(),
)
def test_softmax_along_any_axis(op_type, x, data):
    # Values within +-20: onnx.reference takes log(softmax), which underflows to -inf for
    # spreads near 100 where the kernel (x - max - log(sum)) stays finite and right.
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    model = one_node_model(op_type, {"x": x}, axis=axis)
    got, want = run_against_reference(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
