"""TFLite's CONCATENATION of channels in bands of rows against TensorFlow Lite Micro's whole map."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from runtime.tiling import region_of
from runtime.tiling.regions import AXIS, NHWC
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, run_kernel, run_tflm

pytest.importorskip("tflite_micro")

I8 = np.int8


@pytest.mark.parametrize("axis", [3, -1])
def test_concatenation_bands_equal_tflms_whole_map_and_rows_are_refused(axis):
    """Two int8 maps joined on channels: each band from the rows the region names equals TensorFlow
    Lite Micro's rows; along the rows (axis 1) it is refused."""
    shapes = [(1, 7, 5, 3), (1, 7, 5, 2)]
    inputs = [Tensor(shape, I8, q(0.05, 3)) for shape in shapes]  # TFLM joins int8 maps of one scale only
    outputs = [Tensor((1, 7, 5, 5), I8, q(0.05, 3))]
    options = {"axis": axis, "fused_activation_function": "NONE"}
    rng = np.random.default_rng(4)
    xs = [rng.integers(-128, 128, s).astype(I8) for s in shapes]
    whole = run_tflm(one_op_model("CONCATENATION", inputs, outputs, options), xs)[0]
    fn = region_of(type("N", (), {"domain": "tflite", "op_type": "CONCATENATION"})())
    assert fn is not None
    assert fn({**options, "axis": 1, AXIS: NHWC}, shapes[0], outputs[0].shape, 0, 1) is None
    for rows in (1, 3):
        for y0 in range(0, 7, rows):
            y1 = min(y0 + rows, 7)
            region = fn({**options, AXIS: NHWC}, shapes[0], outputs[0].shape, y0, y1)
            assert region is not None and (region.a, region.b) == (y0, y1)
            band_in = [dataclasses.replace(t, shape=(1, y1 - y0, *t.shape[2:])) for t in inputs]
            band_out = [dataclasses.replace(outputs[0], shape=(1, y1 - y0, 5, 5))]
            got = run_kernel("CONCATENATION", band_in, band_out, options, [x[:, y0:y1] for x in xs])[0]
            np.testing.assert_array_equal(got, whole[:, y0:y1], err_msg=f"rows {y0}:{y1}")
