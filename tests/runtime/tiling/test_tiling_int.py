"""Tiled stages of integer and NHWC models: TFLite's region functions against TensorFlow Lite Micro
band by band, a tiled person_detect bit-exact against TensorFlow Lite Micro and against memplan's
untiled run with the canary on, a wrong tile plan caught, and `--tile auto` never larger than
untiled on the shared `.tflite` models."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import planner
from runtime import CanaryError, MemoryOptions, Session, load_model, memory_problem
from runtime.tiling import chains, region_of, tile_auto, tiled_graph
from runtime.tiling.regions import attributes_of
from runtime.tiling.regions_tflite import FILTER
from tests.runtime.quantized.calibrated import calibrated
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, run_kernel, run_tflm

pytest.importorskip("tflite_micro")

I8 = np.int8
MODELS = Path(__file__).resolve().parents[4] / "shared" / "models" / "tflite"
EXTERNAL = MemoryOptions(io="external")


def _conv(rng, shape, kernel, out_hw, depthwise):
    channels = shape[3]
    w_shape = (1, *kernel, channels) if depthwise else (5, *kernel, channels)
    n_out = w_shape[3] if depthwise else 5
    scales = rng.uniform(0.002, 0.02, n_out)
    inputs = [
        Tensor(shape, I8, q(0.05, 3)),
        Tensor(w_shape, I8, q(scales, 0, 3 if depthwise else 0), rng.integers(-127, 128, w_shape).astype(I8)),
        Tensor((n_out,), np.int32, q(scales * 0.05, 0, 0), rng.integers(-3000, 3000, n_out).astype(np.int32)),
    ]
    out_scale = float(np.sqrt(np.prod(kernel) * (1 if depthwise else channels)) * 0.05 * scales.mean() * 40)
    return inputs, [Tensor((1, *out_hw, n_out), I8, q(out_scale, -4))]


CASES = {  # op, input shape, kernel, output hw, options
    "conv3x3s2same": ("CONV_2D", (1, 11, 9, 3), (3, 3), (6, 5), {"padding": "SAME", "stride_h": 2, "stride_w": 2}),
    "conv5x3valid": ("CONV_2D", (1, 12, 8, 3), (5, 3), (8, 6), {"padding": "VALID"}),
    "conv3x3dil2": ("CONV_2D", (1, 10, 7, 2), (3, 3), (10, 7), {"padding": "SAME", "dilation_h_factor": 2}),
    "dw3x3same": ("DEPTHWISE_CONV_2D", (1, 9, 9, 4), (3, 3), (9, 9), {"padding": "SAME", "depth_multiplier": 1}),
    "dw3x3s2": ("DEPTHWISE_CONV_2D", (1, 10, 6, 4), (3, 3), (5, 3),
                {"padding": "SAME", "stride_h": 2, "stride_w": 2, "depth_multiplier": 1}),
    "avg3x3same": ("AVERAGE_POOL_2D", (1, 9, 7, 4), (3, 3), (5, 4),
                   {"padding": "SAME", "stride_h": 2, "stride_w": 2, "filter_height": 3, "filter_width": 3}),
    "max2x2": ("MAX_POOL_2D", (1, 8, 8, 4), (2, 2), (4, 4),
               {"padding": "VALID", "stride_h": 2, "stride_w": 2, "filter_height": 2, "filter_width": 2}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_band_run_by_memplans_kernel_from_its_region_equals_those_rows_of_tflms_whole_map(case):
    """TensorFlow Lite Micro computes the whole NHWC map; memplan's kernel then computes each band
    alone, from exactly the input rows the region function names, under its `pad_top`."""
    op, shape, kernel, out_hw, options = CASES[case]
    rng = np.random.default_rng(5)
    if op.endswith("POOL_2D"):
        inputs, outputs = [Tensor(shape, I8, q(0.05, 3))], [Tensor((1, *out_hw, shape[3]), I8, q(0.05, 3))]
    else:
        inputs, outputs = _conv(rng, shape, kernel, out_hw, op == "DEPTHWISE_CONV_2D")
    geometry = {"stride_h": 1, "stride_w": 1} | (
        {} if op.endswith("POOL_2D") else {"dilation_h_factor": 1, "dilation_w_factor": 1}
    )
    options = {"fused_activation_function": "NONE", **geometry, **options}
    x = rng.integers(-128, 128, shape).astype(I8)
    whole = run_tflm(one_op_model(op, inputs, outputs, options), [x])[0]
    assert len(np.unique(whole)) > 4
    fn = region_of(type("N", (), {"domain": "tflite", "op_type": op})())
    assert fn is not None
    attrs = {**options, FILTER: kernel[0]}
    for rows in (1, 2, 3):
        for y0 in range(0, out_hw[0], rows):
            y1 = min(y0 + rows, out_hw[0])
            region = fn(attrs, shape, (1, *out_hw, 1), y0, y1)
            assert region is not None and 0 <= region.a < region.b <= shape[1]
            band_in = [dataclasses.replace(inputs[0], shape=(1, region.b - region.a, *shape[2:])), *inputs[1:]]
            band_out = [dataclasses.replace(outputs[0], shape=(1, y1 - y0, *outputs[0].shape[2:]))]
            got = run_kernel(op, band_in, band_out, {**options, **region.overrides}, [x[:, region.a : region.b]])[0]
            np.testing.assert_array_equal(got, whole[:, y0:y1], err_msg=f"{case} rows {y0}:{y1}")


def test_pad_bands_from_their_region_equal_the_whole_pad():
    """PAD's region (bands all padding included) against TensorFlow Lite Micro's whole PAD."""
    paddings = np.array([[0, 0], [2, 1], [1, 1], [0, 0]], np.int32)
    shape, out_shape = (1, 5, 4, 3), (1, 8, 6, 3)
    inputs = [Tensor(shape, I8, q(0.1, -7)), Tensor((4, 2), np.int32, None, paddings)]
    outputs = [Tensor(out_shape, I8, q(0.1, -7))]
    x = np.random.default_rng(2).integers(-128, 128, shape).astype(I8)
    whole = run_tflm(one_op_model("PAD", inputs, outputs, {}), [x])[0]
    node = type("N", (), {"domain": "tflite", "op_type": "PAD", "inputs": ("x", "p"), "attributes": {}})()
    graph = type("G", (), {"constants": {"p": type("C", (), {"value": lambda self: paddings})()}})()
    fn = region_of(node)
    assert fn is not None
    attrs = attributes_of(graph, node, 1)
    for rows in (1, 2, 3):
        for y0 in range(0, out_shape[1], rows):
            y1 = min(y0 + rows, out_shape[1])
            region = fn(attrs, shape, out_shape, y0, y1)
            assert region is not None
            band_in = [dataclasses.replace(inputs[0], shape=(1, region.b - region.a, *shape[2:])), inputs[1]]
            band_out = [dataclasses.replace(outputs[0], shape=(1, y1 - y0, *out_shape[2:]))]
            got = run_kernel("PAD", band_in, band_out, dict(region.overrides), [x[:, region.a : region.b]])[0]
            np.testing.assert_array_equal(got, whole[:, y0:y1], err_msg=f"PAD rows {y0}:{y1}")


@pytest.fixture(scope="module")
def person_detect():
    path = MODELS / "person_detect.tflite"
    if not path.exists():
        pytest.skip(f"{path.name} is not in the shared models")
    graph = load_model(path)
    x = np.random.default_rng(7).integers(-128, 128, graph.tensors[graph.inputs[0]].shape).astype(I8)
    return path, graph, {graph.inputs[0]: x}


@pytest.fixture(scope="module")
def person_detect_tflm(person_detect):
    from runtime.tflite.oracle import outputs_of

    path, _, feeds = person_detect
    return outputs_of("tflite-micro", path.read_bytes(), feeds)


@pytest.mark.parametrize(("head", "rows", "method"), [(7, 3, "stripes"), (13, 2, "patches"), (21, 4, "stripes")])
def test_tiled_person_detect_is_bit_exact_against_tflm_and_the_untiled_run(
    person_detect, person_detect_tflm, head, rows, method
):
    path, graph, feeds = person_detect
    chain = next(c for c in chains(graph) if len(c.nodes) == head)
    assert chain.axis(chain.output) == 1  # NHWC: the rows are on axis 1, as the ops' layouts say
    tiled = tiled_graph(graph, chain, rows, method)
    assert any(n.op_type == "TileRows" and n.attributes.get("axis") == 1 for n in tiled.nodes)
    got = Session(tiled, "greedy_by_size", EXTERNAL, canary=True).prepare().run(feeds)
    untiled = Session(graph, "greedy_by_size", EXTERNAL).prepare().run(feeds)
    for name, want in person_detect_tflm.items():
        assert got[name].dtype == want.dtype
        assert int((got[name] != want).sum()) == 0, f"{name} differs from TensorFlow Lite Micro's"
        np.testing.assert_array_equal(got[name], untiled[name])


def test_the_canary_catches_a_wrong_tile_plan_of_an_integer_model(person_detect):
    _, graph, feeds = person_detect
    chain = next(c for c in chains(graph) if len(c.nodes) == 9)
    tiled = tiled_graph(graph, chain, 2, "stripes")
    problem = memory_problem(tiled, EXTERNAL)
    plan = planner.plan(problem, "greedy_by_size")
    # a tile later bands still read (alive longest; in place over its producer's input here, as
    # most of this model's maps are), and a buffer first written while it waits
    tiles = [b for b in problem.buffers if "@" in b.id and "placed" not in b.id]
    writers = [b for b in problem.buffers if b.alias_of is None and b.size > 0]
    kept, writer = next(
        (k, w)
        for k in sorted(tiles, key=lambda b: (b.first - b.last, b.id))
        for w in writers
        if k.first < w.first < k.last and w.kind == "activation"
    )
    offsets = dict(plan.offsets)
    offsets[writer.id] = dataclasses.replace(offsets[writer.id], offset=offsets[kept.id].offset)
    wrong = dataclasses.replace(plan, offsets=offsets)
    session = Session(tiled, wrong, EXTERNAL, canary=True, check=False, problem=problem).prepare()
    with pytest.raises(CanaryError) as caught:
        session.run(feeds)
    assert kept.id in str(caught.value) and "@" in caught.value.node


@pytest.mark.parametrize(
    "name", ["hello_world_int8.tflite", "micro_speech_quantized.tflite", "person_detect.tflite",
             "keyword_scrambled_8bit.tflite"],
)  # fmt: skip
@pytest.mark.parametrize("options", [EXTERNAL, MemoryOptions()], ids=["inputs-outside", "inputs-inside"])
def test_tile_auto_never_returns_a_larger_arena_on_the_shared_models(name, options):
    path = MODELS / name
    if not path.exists():
        pytest.skip(f"{name} is not in the shared models")
    graph = load_model(path)
    tiling = tile_auto(graph, options)
    untiled = planner.plan(memory_problem(graph, options), "greedy_by_size").arena_bytes
    arena = planner.plan(memory_problem(tiling.graph, options), "greedy_by_size").arena_bytes
    assert arena <= untiled == tiling.arena_bytes_untiled
    assert (tiling.chosen is None) == (arena == untiled or tiling.graph is graph), tiling.note


@pytest.fixture(scope="module")
def qdq_mobilenet(tmp_path_factory):
    """A small MobileNetV2-like net quantized by onnxruntime's own tool (QDQ, int8, per channel)."""
    import onnx

    from runtime.training.models import mobilenet_v2_like

    pytest.importorskip("onnxruntime.quantization")
    folder = tmp_path_factory.mktemp("qdq")
    float_path, path = folder / "float.onnx", folder / "qdq.onnx"
    onnx.save(mobilenet_v2_like(size=32, width=0.35, classes=10), float_path)
    shape = (1, 3, 32, 32)

    calibrated(
        float_path, path, [{"x": np.random.default_rng(i).standard_normal(shape).astype(np.float32)} for i in range(2)]
    )
    return path, {"x": np.random.default_rng(9).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("method", ["stripes", "patches"])
def test_a_tiled_qdq_model_equals_its_untiled_run_bit_for_bit(qdq_mobilenet, method):
    """QuantizeLinear, QLinearConv and QLinearAdd in NCHW bands give the very integers the whole maps
    give (the untiled run's fidelity to onnxruntime is tests/runtime/quantized/test_fuse_qdq.py's; over a
    deep net its rounding differences compound, so the logits are no per-step oracle here)."""
    path, feeds = qdq_mobilenet
    graph = load_model(path)
    heads = chains(graph)
    chain = heads[len(heads) // 2]
    assert {"QuantizeLinear", "QLinearConv", "QLinearAdd"} <= {n.op_type for n in chain.nodes}
    assert chain.axis(chain.output) == 2
    tiled = tiled_graph(graph, chain, 2, method)
    session = Session(tiled, "greedy_by_size", EXTERNAL, canary=True).prepare()
    got = session.run(feeds)
    want = Session(graph, "greedy_by_size", EXTERNAL).prepare().run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
