"""A tiled stage's bands prepare their node's weights once: every band node of a TFLite CONV_2D
(whose constants hook packs its weights into columns) shares the untiled node's prepared
arrays, so the session's parameter bytes do not grow with the band count, and the tiled run
stays bit-exact against TensorFlow Lite Micro and the untiled run."""

from __future__ import annotations

import numpy as np
import pytest

from runtime import MemoryOptions, Session, load_model
from runtime.params import PreparedConstants
from runtime.tiling import chains, tiled_graph
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, run_tflm

I8 = np.int8


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    rng = np.random.default_rng(11)
    shape, w_shape = (1, 12, 8, 3), (5, 3, 3, 3)
    scales = rng.uniform(0.002, 0.02, 5)
    inputs = [
        Tensor(shape, I8, q(0.05, 3)),
        Tensor(w_shape, I8, q(scales, 0, 0), rng.integers(-127, 128, w_shape).astype(I8)),
        Tensor((5,), np.int32, q(scales * 0.05, 0, 0), rng.integers(-3000, 3000, 5).astype(np.int32)),
    ]
    outputs = [Tensor((1, 12, 8, 5), I8, q(0.2, -4))]
    options = {"padding": "SAME", "stride_h": 1, "stride_w": 1, "dilation_h_factor": 1, "dilation_w_factor": 1}
    data = one_op_model("CONV_2D", inputs, outputs, {"fused_activation_function": "RELU", **options})
    path = tmp_path_factory.mktemp("bands") / "conv.tflite"
    path.write_bytes(data)
    x = rng.integers(-128, 128, shape).astype(I8)
    return data, load_model(path), x


@pytest.mark.parametrize("rows", [4, 2, 1])
def test_parameter_bytes_do_not_grow_with_the_band_count(conv_model, rows):
    pytest.importorskip("tflite_micro")
    data, graph, x = conv_model
    options = MemoryOptions(io="external")
    untiled = Session(graph, "greedy_by_size", options).prepare()
    tiled_graph_ = tiled_graph(graph, chains(graph)[0], rows, "stripes")
    bands = [n for n in tiled_graph_.nodes if n.op_type == "CONV_2D"]
    assert len(bands) >= 12 // rows  # one node per band (a last one for the rows the window waited for)
    tiled = Session(tiled_graph_, "greedy_by_size", options, canary=True).prepare()
    assert untiled.constant_bytes > 0  # the packed columns of the weights
    assert tiled.constant_bytes == untiled.constant_bytes
    feeds = {graph.inputs[0]: x}
    got, want = tiled.run(feeds), untiled.run(feeds)
    oracle = run_tflm(data, [x])[0]
    (name,) = graph.outputs
    np.testing.assert_array_equal(got[name], want[name])
    np.testing.assert_array_equal(got[name], oracle)


def test_prepared_constants_hold_equal_arrays_once_and_keep_others_apart():
    held = PreparedConstants()
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    first = held({"w": a, "n": 3})
    assert first["w"] is a and first["n"] == 3 and held.added == a.nbytes
    again = held({"w": a.copy()})
    assert again["w"] is a and held.added == 0
    other = held({"w": a.reshape(3, 2).copy(), "v": a.astype(np.int64)})  # another shape, another dtype
    assert other["w"] is not a and other["v"] is not a and held.added == a.nbytes * 3
