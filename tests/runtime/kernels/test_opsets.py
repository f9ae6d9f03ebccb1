"""Semantics that changed across opsets (attributes that became inputs, Softmax's axis),
and Cast between numpy's types, each against onnx.reference on a one-node model."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from runtime.kernels import get_kernel
from tests.runtime.kernels.harness import assert_same, one_node_model, run_against_reference, run_kernel

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
I64 = np.int64


def check(op_type, feeds, opset, n_outputs=1, **attrs):
    model = one_node_model(op_type, feeds, n_outputs=n_outputs, opset=opset, **attrs)
    got, want = run_against_reference(model, {n: x for n, x in feeds.items() if x is not None})
    assert_same(got, want)


def check_with_onnxruntime(op_type, feeds, opset, **attrs):
    """For semantics onnx.reference does not implement (Softmax before opset 13, negative
    pads): onnxruntime is the oracle. The output has input 0's type."""
    model = one_node_model(op_type, feeds, opset=opset, **attrs)
    model.graph.output[0].type.tensor_type.elem_type = model.graph.input[0].type.tensor_type.elem_type
    model.ir_version = 8  # onnxruntime may trail onnx's newest IR version; 8 covers these opsets
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    present = {n: x for n, x in feeds.items() if x is not None}
    want = session.run(None, present)
    got = run_kernel(model, list(feeds.values()), like=want)
    assert_same(got, want)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
def test_softmax_axis_before_and_after_opset_13(op_type, opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    check_with_onnxruntime(op_type, {"x": X}, opset, **attrs)


def test_clip_bounds_as_attributes_then_inputs():
    check("Clip", {"x": X}, 6, min=-0.5, max=0.5)
    check("Clip", {"x": X}, 6, max=0.25)
    check("Clip", {"x": X, "lo": None, "hi": np.float32(0.1)}, 13)
    check("Clip", {"x": X, "lo": np.float32(-0.1)}, 13)
    check("Clip", {"x": X}, 13)
    ints = RNG.integers(-9, 9, (4, 5)).astype(np.int32)
    check("Clip", {"x": ints, "lo": np.int32(-2), "hi": np.int32(3)}, 13)


def test_split_as_attribute_then_input():
    check("Split", {"x": X}, 11, n_outputs=2, axis=2, split=[1, 3])
    check("Split", {"x": X, "split": np.array([2, 1], I64)}, 13, n_outputs=2, axis=1)
    check("Split", {"x": X}, 11, n_outputs=3, axis=1)


def test_slice_as_attributes_then_inputs():
    check("Slice", {"x": X}, 9, starts=[1, -3], ends=[2, 100], axes=[0, 2])
    feeds = {
        "x": X,
        "starts": np.array([-1, 3], I64),
        "ends": np.array([-100, 0], I64),
        "axes": np.array([1, 2], I64),
        "steps": np.array([-1, -2], I64),
    }
    check("Slice", feeds, 13)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_as_attributes_then_inputs(mode):
    pads = [0, 1, 2, 1, 0, 3]
    check("Pad", {"x": X}, 2, pads=pads, mode=mode, value=1.5)
    check("Pad", {"x": X, "pads": np.array(pads, I64)}, 11, mode=mode)


def test_pad_crops_with_negative_pads_and_wraps_beyond_the_input():
    check_with_onnxruntime(
        "Pad", {"x": X, "pads": np.array([0, -1, 1, 0, 1, -2], I64), "v": np.array(3, np.float32)}, 13
    )
    check("Pad", {"x": X, "pads": np.array([0, 0, 6, 0, 0, 7], I64)}, 19, mode="wrap")
    check("Pad", {"x": X, "pads": np.array([0, 0, 5, 0, 0, 7], I64)}, 19, mode="reflect")


def test_squeeze_and_unsqueeze_axes_as_attribute_then_input():
    y = X.reshape(2, 1, 3, 1, 4)
    check("Squeeze", {"x": y}, 11, axes=[1, -2])
    check("Squeeze", {"x": y, "axes": np.array([3], I64)}, 13)
    check("Squeeze", {"x": y}, 13)
    check("Unsqueeze", {"x": X}, 11, axes=[0, 4])
    check("Unsqueeze", {"x": X, "axes": np.array([-1, 1], I64)}, 13)


@pytest.mark.parametrize("op_type", ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"])
def test_reduce_axes_as_attribute_before_opset_18(op_type):
    check(op_type, {"x": X}, 13, axes=[0, -1], keepdims=0)
    check(op_type, {"x": X}, 13, axes=[1])
    check(op_type, {"x": X}, 13)


def test_reduce_sum_axes_as_attribute_before_opset_13():
    check("ReduceSum", {"x": X}, 11, axes=[2], keepdims=0)
    check("ReduceSum", {"x": X, "axes": np.array([], I64)}, 13, noop_with_empty_axes=1)


def test_reduce_mean_of_integers_truncates():
    ints = RNG.integers(-20, 20, (3, 5)).astype(np.int32)
    check("ReduceMean", {"x": ints, "axes": np.array([1], I64)}, 18)


def test_dropout_before_opset_12_is_the_identity():
    check("Dropout", {"x": X}, 10, ratio=0.3)
    check("Dropout", {"x": X}, 10, n_outputs=2)


def test_shape_start_end():
    for start, end in [(0, None), (-2, None), (1, -1), (-10, 10), (2, 1)]:
        attrs = {"start": start} if end is None else {"start": start, "end": end}
        check("Shape", {"x": X}, 15, **attrs)


CAST_VALUES = np.array([-3.7, -1.0, -0.5, 0.0, 0.5, 1.0, 2.5, 100.25], dtype=np.float32)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (np.float32, np.int32),
        (np.float32, np.uint8),
        (np.float32, np.bool_),
        (np.float32, np.int64),
        (np.float64, np.float16),
        (np.bool_, np.float32),
        (np.int64, np.float64),
        (np.int32, np.int8),
        (np.uint8, np.int64),
        (np.int8, np.bool_),
        (np.float16, np.int32),
    ],
)
def test_cast_between_numeric_and_bool_types(source, target):
    values = np.abs(CAST_VALUES) if source == np.float32 and target == np.uint8 else CAST_VALUES
    x = values.astype(source) if source != np.bool_ else values > 0
    check("Cast", {"x": x}, 21, to=helper.np_dtype_to_tensor_dtype(np.dtype(target)))
    like = np.zeros(1, dtype=target)
    check("CastLike", {"x": x, "like": like}, 21)


@pytest.mark.parametrize(
    "x",
    [np.array([0.1, -2.5, 1e10, np.nan, 3.0], np.float32), np.array([1, -7], np.int64), np.array([True, False])],
)
def test_cast_to_string_formats_as_the_reference(x):
    check("Cast", {"x": x}, 21, to=TensorProto.STRING)
    # A runtime may hold strings in object arrays rather than fixed-width unicode.
    out = np.empty(x.shape, dtype=object)
    get_kernel("Cast").fn(x, out=out, to=TensorProto.STRING)
    _, want = run_against_reference(one_node_model("Cast", {"x": x}, opset=21, to=TensorProto.STRING), {"x": x})
    assert out.tolist() == np.asarray(want[0]).tolist()


def test_cast_from_string():
    check("Cast", {"x": np.array(["1.5", "-2", "nan", "1e3"], dtype=object)}, 21, to=TensorProto.FLOAT)
