"""A tiled integer run makes nothing per band that it keeps: TileRows and PAD bind their views and slices
once, at prepare, so what a traced tiled run holds beside the arena stays at the untiled run's, plus the
run's own per-step times (8 bytes a step), whatever the number of bands. Outputs bit for bit against
TensorFlow Lite Micro and memplan's untiled run.

The routes these tests replaced fail them: TileRows made its views again on every run where a source was
the graph input (a fresh view each run) and kept them, and PAD built its slices by `tuple(generator)`,
whose tuples CPython's free list kept: person_detect in 1-row stripes held 19.8 KB against 8.8 KB."""

from __future__ import annotations

import numpy as np
import pytest

from runtime import MemoryOptions, Session, load_model
from runtime.kernels import JIT_ENABLED, get_kernel
from runtime.tflite.writer import Operator, model_bytes
from runtime.tiling import chains, tiled_graph
from runtime.tiling.rows import OP_TYPE
from tests.runtime.quantized.tflite_ops import Tensor, q, run_tflm
from tests.runtime.tflite.shared import model_path

I8 = np.int8
SLACK = 4 * 1024  # a band step's own transient views and a compiled call's arguments, at the peak
STEP_TIME = 8  # the run's float64 time per step, which a traced run counts


def _beside(graph, feeds, options: MemoryOptions) -> tuple[int, dict[str, np.ndarray], int]:
    session = Session(graph, "greedy_by_size", options).prepare()
    session.run(feeds)  # numpy sets its own machinery up on a first call
    outputs = session.run(feeds, measure="memory")
    assert session.stats.outside_arena_bytes is not None
    return session.stats.outside_arena_bytes, outputs, len(session.stats.step_labels)


@pytest.fixture(scope="module")
def person_detect():
    path = model_path("person_detect")
    graph = load_model(path)
    x = np.random.default_rng(11).integers(-128, 128, graph.tensors[graph.inputs[0]].shape).astype(np.int8)
    return path, graph, {graph.inputs[0]: x}


@pytest.mark.skipif(not JIT_ENABLED, reason="the numpy routes of convolutions make their own temporaries")
@pytest.mark.parametrize("workspace", [True, False], ids=["with-scratch", "activations"])
def test_a_tiled_int8_run_holds_what_the_untiled_one_holds(person_detect, workspace):
    path, graph, feeds = person_detect
    options = MemoryOptions(io="external", workspace=workspace)
    chain = next(c for c in chains(graph) if len(c.nodes) == 21)
    tiled = tiled_graph(graph, chain, 1, "stripes")  # the most bands: 544 steps
    assert sum(n.op_type == OP_TYPE for n in tiled.nodes) > 100
    untiled_bytes, untiled, _ = _beside(graph, feeds, options)
    tiled_bytes, got, steps = _beside(tiled, feeds, options)
    bound = untiled_bytes + STEP_TIME * steps + SLACK
    assert tiled_bytes <= bound, f"{tiled_bytes:,} bytes beside the arena over {steps} steps (bound {bound:,})"
    want = run_tflm(path.read_bytes(), list(feeds.values()))[0]
    (name,) = got
    np.testing.assert_array_equal(got[name], want)
    np.testing.assert_array_equal(got[name], untiled[name])


def _pad_net(rng: np.random.Generator, h: int = 48, w: int = 10, c: int = 8) -> bytes:
    """PAD (bottom and right, as before MobileNetV2's stride-2 depthwise convs), a 3x3 stride-2 depthwise
    CONV_2D and a 1x1 CONV_2D, NHWC int8."""
    s1, s2 = rng.uniform(0.002, 0.02, c), rng.uniform(0.002, 0.02, c)
    oh, ow = (h + 1 - 3) // 2 + 1, (w + 1 - 3) // 2 + 1
    tensors = [
        Tensor((1, h, w, c), I8, q(0.05, 3)),
        Tensor((4, 2), np.int32, None, np.array([[0, 0], [0, 1], [0, 1], [0, 0]], np.int32)),
        Tensor((1, h + 1, w + 1, c), I8, q(0.05, 3)),
        Tensor((1, 3, 3, c), I8, q(s1, 0, 3), rng.integers(-127, 128, (1, 3, 3, c)).astype(I8)),
        Tensor((c,), np.int32, q(s1 * 0.05, 0, 0), rng.integers(-3000, 3000, c).astype(np.int32)),
        Tensor((1, oh, ow, c), I8, q(float(6 * s1.mean()), -4)),
        Tensor((c, 1, 1, c), I8, q(s2, 0, 0), rng.integers(-127, 128, (c, 1, 1, c)).astype(I8)),
        Tensor((c,), np.int32, q(s2 * 0.08, 0, 0), rng.integers(-3000, 3000, c).astype(np.int32)),
        Tensor((1, oh, ow, c), I8, q(0.1, 1)),
    ]
    window = {"fused_activation_function": "NONE", "dilation_h_factor": 1, "dilation_w_factor": 1}
    operators = [
        Operator("PAD", [0, 1], [2]),
        Operator("DEPTHWISE_CONV_2D", [2, 3, 4], [5],
                 window | {"padding": "VALID", "stride_h": 2, "stride_w": 2, "depth_multiplier": 1}),
        Operator("CONV_2D", [5, 6, 7], [8], window | {"padding": "VALID", "stride_h": 1, "stride_w": 1}),
    ]  # fmt: skip
    return model_bytes(tensors, operators, [0], [8])


@pytest.mark.skipif(not JIT_ENABLED, reason="the numpy routes of convolutions make their own temporaries")
def test_tiled_pad_bands_keep_nothing_per_band():
    """48 PAD bands and 96 TileRows a run (the first reading the graph input): 19,981 bytes beside the
    arena before, against the untiled run's 2,717."""
    data = _pad_net(np.random.default_rng(1))
    graph = load_model(data)
    chain = max(chains(graph), key=lambda c: len(c.nodes))
    assert [n.op_type for n in chain.nodes] == ["PAD", "DEPTHWISE_CONV_2D", "CONV_2D"]
    tiled = tiled_graph(graph, chain, 1, "stripes")
    assert sum(n.op_type == "PAD" for n in tiled.nodes) == 48
    x = np.random.default_rng(2).integers(-128, 128, (1, 48, 10, 8)).astype(I8)
    feeds = {graph.inputs[0]: x}
    options = MemoryOptions(io="external")
    untiled_bytes, untiled, _ = _beside(graph, feeds, options)
    tiled_bytes, got, steps = _beside(tiled, feeds, options)
    bound = untiled_bytes + STEP_TIME * steps + SLACK
    assert tiled_bytes <= bound, f"{tiled_bytes:,} bytes beside the arena over {steps} steps (bound {bound:,})"
    (name,) = got
    want = run_tflm(data, [x])[0]
    assert len(np.unique(want)) > 100  # not saturated
    np.testing.assert_array_equal(got[name], want)
    np.testing.assert_array_equal(got[name], untiled[name])


def test_tile_rows_bound_takes_a_fresh_source_each_call_and_keeps_nothing_of_it():
    """The bound call primed with a source it does not have yet (a graph input) slices each call's own
    source, as the general route does; an output other than the primed one takes the general route."""
    rng = np.random.default_rng(3)
    k = get_kernel(OP_TYPE, "memplan")
    assert k is not None and k.bind is not None
    attrs = {"starts": [0, 4], "first": 2, "columns": [1, 2], "axis": 2}  # NCHW rows, two columns padded
    shapes = [(1, 3, 6, 5), (1, 3, 5, 5)]
    out = np.full((1, 3, 6, 8), 99, np.int8)
    made = k.bind([np.empty(s, np.int8) for s in shapes], [out], attrs)
    assert made is not None and made.prime is not None
    second = rng.integers(-128, 128, shapes[1]).astype(np.int8)
    made.prime(None, second, out=out)
    for _ in range(3):
        first = rng.integers(-128, 128, shapes[0]).astype(np.int8)
        made.run(first, second, out=out)
        # map rows 2..7: the first source's 2..5 (its rows 2..5), then the second's 4..7 (its rows 0..3)
        want = np.zeros_like(out)
        want[:, :, 0:4, 1:6] = first[:, :, 2:6]
        want[:, :, 2:6, 1:6] = second[:, :, 0:4]
        np.testing.assert_array_equal(out, want)
        other = np.full_like(out, 99)
        made.run(first, second, out=other)
        np.testing.assert_array_equal(other, want)
