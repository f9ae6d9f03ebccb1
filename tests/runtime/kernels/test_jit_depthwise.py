"""The compiled depthwise Conv (`runtime.kernels.conv.jit_depthwise`) with its fused activation, and
the numpy routes it replaces, against onnx.reference: seeded random geometries (kernel sizes 1
to 5, strides 1 to 3, dilations, asymmetric pads, auto_pad, odd sizes, batches up to 3, with
and without bias) for each activation ConvAct fuses, NaN and infinities in the input; the
same through the ConvAct kernel with the compiled loop and with the numpy route forced; over
the Conv's own input (planes' direct route, no chunk), and a whole model with the canary
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels import TensorMeta, get_kernel, jit_activation, planes
from runtime.kernels.conv import jit_depthwise
from runtime.kernels.conv.depthwise import compiled_layout, uses_compiled
from runtime.kernels.conv.jit_depthwise import channels_last_layout
from runtime.kernels.conv.routes import conv_route
from runtime.kernels.window import window_geometry
from runtime.oracle import oracle_outputs
from tests.runtime.kernels.harness import CONV_ACT_IDS, CONV_ACTS, conv_reference

needs_jit = pytest.mark.skipif(jit_depthwise.depthwise is None, reason="compiled loops off or numba missing")

ACTS, ACT_IDS = CONV_ACTS, CONV_ACT_IDS


def _reference(x, w, b, conv_attrs, act_nodes) -> np.ndarray:
    """onnx.reference's depthwise Conv (group = channels) followed by the activation's nodes."""
    return conv_reference(x, w, b, {"group": x.shape[1], **conv_attrs}, act_nodes)


def _case(seed: int, *, special: bool = False):
    rng = np.random.default_rng(9100 + seed)
    kernel = [int(k) for k in rng.integers(1, 6, 2)]
    attrs: dict = {
        "kernel_shape": kernel,
        "strides": [int(s) for s in rng.integers(1, 4, 2)],
        "dilations": [int(d) for d in rng.integers(1, 3, 2)],
    }
    if special:  # onnx.reference dilates a kernel with zero taps, which turns an infinity into NaN
        attrs["dilations"] = [1, 1]
    if seed % 5 == 4:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["pads"] = [int(rng.integers(0, k + 1)) for k in kernel * 2]
    channels, batch = int(rng.integers(1, 7)), int(rng.integers(1, 4))
    spatial = [int(s) for s in rng.integers(9, 41, 2)]
    x = rng.standard_normal((batch, channels, *spatial)).astype(np.float32) * 3
    if special:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, 1e30, -1e30, np.nan]
    w = rng.standard_normal((channels, 1, *kernel)).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32) if seed % 3 else None
    return x, w, b, attrs


def _out_shape(x, w, attrs) -> tuple[int, ...]:
    return _reference(x, w, None, attrs, []).shape


@needs_jit
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize(("act", "nodes"), ACTS, ids=ACT_IDS)
def test_the_compiled_loop_matches_the_reference(act, nodes, special):
    for seed in range(12):
        x, w, b, attrs = _case(seed, special=special)
        want = _reference(x, w, b, attrs, nodes)
        geo = window_geometry(x.shape, want.shape, tuple(attrs["kernel_shape"]), attrs.get("auto_pad", "NOTSET"),
                              attrs.get("pads"), attrs["strides"], attrs["dilations"])  # fmt: skip
        (subs_shape, _), (acc_shape, _) = jit_depthwise.compiled_layout(x.shape, geo, np.float32)
        # Scratch full of NaN: anything read but never written (a pad, a spare column) shows.
        subs, acc = np.full(subs_shape, np.nan, np.float32), np.full(acc_shape, np.nan, np.float32)
        got = np.full(want.shape, np.nan, np.float32)
        bounds = {k: v for k, v in act.items() if k != "activation"}
        spec = jit_activation.spec(act.get("activation", ""), **bounds)
        jit_depthwise.conv_depthwise_compiled(x, w, b, got, geo, subs, acc, spec)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


def _conv_act(x, w, b, shape, attrs) -> np.ndarray:
    kernel = get_kernel("ConvAct", "memplan")
    assert kernel is not None and kernel.workspace is not None
    bias = b if b is not None else np.zeros(x.shape[1], np.float32)
    metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, bias)]
    out = np.full(shape, np.nan, np.float32)
    ws = np.full(kernel.workspace(metas, [TensorMeta(shape, out.dtype)], group=x.shape[1], **attrs), 255, np.uint8)
    kernel.fn(x, w, bias, out=out, ws=ws, group=x.shape[1], **attrs)
    return out


@pytest.mark.parametrize("route", ["compiled", "numpy"])
@pytest.mark.parametrize(("act", "nodes"), ACTS[1:], ids=ACT_IDS[1:])
def test_conv_act_matches_the_reference_on_both_routes(act, nodes, route, monkeypatch):
    if route == "numpy":
        monkeypatch.setattr("runtime.kernels.conv.routes.uses_compiled", lambda geo, dtype: False)
        monkeypatch.setattr(jit_activation, "activate", None)
    elif jit_depthwise.depthwise is None:
        pytest.skip("compiled loops off or numba missing")
    for seed in range(8):
        # Finite inputs: the numpy routes' banded matrices multiply an infinity by their zeros.
        x, w, b, attrs = _case(seed)
        want = _reference(x, w, b, attrs, nodes)
        got = _conv_act(x, w, b, want.shape, {**attrs, **act})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


@needs_jit
def test_float32_2d_convs_take_the_compiled_loops_channels_last_below_14_columns():
    def geo(size, kernel, stride):
        out = (size + 2 * (kernel // 2) - kernel) // stride + 1
        pads = [kernel // 2] * 4
        return window_geometry(
            (1, 8, size, size), (1, 8, out, out), (kernel, kernel), "NOTSET", pads, [stride] * 2, None
        )

    f32 = np.dtype(np.float32)
    assert uses_compiled(geo(112, 3, 2), f32) and uses_compiled(geo(7, 5, 1), f32)
    assert not uses_compiled(geo(56, 3, 1), np.dtype(np.float64)) and not uses_compiled(
        geo(56, 3, 1), np.dtype(np.float16)
    )
    assert len(compiled_layout((1, 8, 14, 14), geo(14, 3, 1), f32)) == 2  # sub-planes and a tile
    assert len(compiled_layout((1, 8, 14, 14), geo(14, 3, 2), f32)) == 3  # 7 wide: channels-last


@needs_jit
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize(("act", "nodes"), ACTS, ids=ACT_IDS)
def test_the_channels_last_loop_matches_the_reference(act, nodes, special):
    for seed in range(12):
        x, w, b, attrs = _case(seed, special=special)
        want = _reference(x, w, b, attrs, nodes)
        geo = window_geometry(x.shape, want.shape, tuple(attrs["kernel_shape"]), attrs.get("auto_pad", "NOTSET"),
                              attrs.get("pads"), attrs["strides"], attrs["dilations"])  # fmt: skip
        image, taps, rows = (
            np.full(shape, np.nan, np.float32) for shape, _ in channels_last_layout(x.shape, geo, np.float32)
        )
        got = np.full(want.shape, np.nan, np.float32)
        bounds = {k: v for k, v in act.items() if k != "activation"}
        spec = jit_activation.spec(act.get("activation", ""), **bounds)
        jit_depthwise.conv_channels_last(x, w, b, got, geo, image, taps, rows, spec)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


# (spatial, kernel, strides, dilations, pads): each specialisation of the two loops. The flat
# loop: 3x3 and 5x5 (column stride 1 or 2) in one pass, other kernels tap by tap; stride-2 rows
# split into their two parities (8 or 16 pairs at a time, an overlapping last chunk, an odd last
# column, either pad parity), larger strides column by column; tiles of several short rows,
# one row per tile, a row wider than a tile. Channels-last: 5x5 quads of pixels at strides 1 and
# 2, pixel pairs and an odd last pixel, 3x3 and 5x5 passes and other kernels, 70 channels (four
# blocks of 16 transposed in registers and a rest), pixel counts not a multiple of 16.
GEOMETRIES = [
    ((13, 15), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ((14, 17), (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),
    ((9, 10), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    ((15, 14), (5, 5), (2, 2), (1, 1), (2, 1, 2, 2)),
    ((12, 13), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),
    ((16, 11), (5, 5), (1, 2), (2, 1), (4, 2, 3, 1)),
    ((10, 9), (4, 2), (1, 3), (1, 1), (1, 0, 2, 1)),
    ((11, 12), (7, 7), (1, 1), (1, 1), (3, 3, 3, 3)),
    ((8, 9), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    ((40, 70), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ((4, 2100), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    ((33, 66), (3, 3), (3, 3), (1, 1), (1, 2, 0, 1)),
    ((9, 50), (3, 3), (2, 2), (1, 1), (1, 0, 1, 1)),
    ((7, 51), (5, 5), (2, 2), (1, 1), (2, 1, 2, 2)),
]
GEOMETRY_IDS = ["3x3", "3x3-s2-asym", "5x5", "5x5-s2", "3x3-d2", "5x5-s12-d21", "4x2-s13", "7x7", "1x1",
                "3x3-wide", "5x5-wider-than-a-tile", "3x3-s3", "3x3-s2-wide", "5x5-s2-wide-odd"]  # fmt: skip


@needs_jit
@pytest.mark.parametrize("loop", ["flat", "channels_last"])
@pytest.mark.parametrize(("act", "nodes"), ACTS, ids=ACT_IDS)
@pytest.mark.parametrize(("spatial", "kernel", "strides", "dilations", "pads"), GEOMETRIES, ids=GEOMETRY_IDS)
def test_each_specialisation_of_both_loops_matches_the_reference(spatial, kernel, strides, dilations, pads, act,
                                                                  nodes, loop):  # fmt: skip
    rng = np.random.default_rng(sum(spatial) + 7 * kernel[0] + kernel[1])
    c = 70 if loop == "channels_last" else 5
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "dilations": list(dilations), "pads": list(pads)}
    for bias in (True, False):
        x = rng.standard_normal((2, c, *spatial)).astype(np.float32) * 3
        w = rng.standard_normal((c, 1, *kernel)).astype(np.float32)
        b = rng.standard_normal(c).astype(np.float32) if bias else None
        want = _reference(x, w, b, attrs, nodes)
        geo = window_geometry(x.shape, want.shape, kernel, "NOTSET", list(pads), list(strides), list(dilations))
        bounds = {k: v for k, v in act.items() if k != "activation"}
        spec = jit_activation.spec(act.get("activation", ""), **bounds)
        got = np.full(want.shape, np.nan, np.float32)
        if loop == "flat":
            layout = jit_depthwise.compiled_layout(x.shape, geo, np.float32)
            subs, acc = (np.full(shape, np.nan, np.float32) for shape, _ in layout)
            jit_depthwise.conv_depthwise_compiled(x, w, b, got, geo, subs, acc, spec)
        else:
            layout = channels_last_layout(x.shape, geo, np.float32)
            image, taps, sums = (np.full(shape, np.nan, np.float32) for shape, _ in layout)
            jit_depthwise.conv_channels_last(x, w, b, got, geo, image, taps, sums, spec)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"bias {bias}")


OVER = [  # (spatial, kernel, attrs): outputs the compiled loop takes, smaller and equal
    ((28, 30), 3, {"strides": [1, 1], "pads": [1, 1, 1, 1]}),
    ((56, 57), 3, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((16, 17), 5, {"strides": [1, 1], "pads": [2, 1, 2, 0]}),
    ((20, 20), 3, {"strides": [1, 1]}),  # unpadded: a smaller output
    ((7, 7), 5, {"strides": [1, 1], "pads": [2, 2, 2, 2]}),  # channels-last from here on
    ((14, 13), 3, {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((11, 11), 3, {"strides": [1, 1]}),
]


@needs_jit
@pytest.mark.parametrize("op", ["Conv", "ConvAct"])
@pytest.mark.parametrize(
    ("spatial", "k", "attrs"),
    OVER,
    ids=["same", "strided", "asymmetric", "smaller", "cl-same", "cl-strided", "cl-smaller"],
)
def test_the_compiled_loop_over_its_own_input_matches_the_reference(spatial, k, attrs, op, monkeypatch):
    rng = np.random.default_rng(77)
    c = 5
    x = rng.standard_normal((3, c, *spatial)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    act = {"activation": "HardSwish"} if op == "ConvAct" else {}
    want = _reference(x, w, b, {**attrs, "kernel_shape": [k, k]}, [("HardSwish", {})] if act else [])
    _, path = conv_route(x.shape, w.shape, want.shape, {**attrs, "group": c})
    geo = window_geometry(x.shape, want.shape, (k, k), "NOTSET", attrs.get("pads"), attrs["strides"], None)
    assert uses_compiled(geo, x.dtype), path
    kernel = get_kernel(op, "memplan" if op == "ConvAct" else "")
    assert kernel is not None and kernel.workspace is not None
    memory = x.copy()
    y = memory.reshape(-1)[: want.size].reshape(want.shape)

    def no_chunk(*args, **kwargs):
        raise AssertionError("the chunked path ran")

    monkeypatch.setattr(planes, "_in_place", no_chunk)
    metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    ws = np.empty(kernel.workspace(metas, [TensorMeta(y.shape, y.dtype)], group=c, **attrs, **act), np.uint8)
    kernel.fn(memory, w, b, out=y, ws=ws, group=c, **attrs, **act)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("act", ["Silu", "HardSwish", "Clip"])
def test_a_mobile_block_runs_with_the_canary_against_onnxruntime(act):
    """Depthwise convs over maps the compiled loop takes, each fused with its activation,
    planned in one arena (over their own inputs where the planner puts them there)."""
    rng = np.random.default_rng(5)
    c = 16
    inits, nodes, last = [], [], "x"
    for k, (kernel, stride) in enumerate([(3, 1), (5, 2), (3, 1)]):
        w = (rng.standard_normal((c, 1, kernel, kernel)) * 0.3).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"w{k}"),
            numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"b{k}"),
        ]
        pad = kernel // 2
        nodes.append(helper.make_node("Conv", [last, f"w{k}", f"b{k}"], [f"c{k}"], group=c, kernel_shape=[kernel] * 2,
                                      pads=[pad] * 4, strides=[stride] * 2))  # fmt: skip
        if act == "Silu":
            nodes += [
                helper.make_node("Sigmoid", [f"c{k}"], [f"g{k}"]),
                helper.make_node("Mul", [f"c{k}", f"g{k}"], [f"y{k}"]),
            ]
        elif act == "Clip":
            nodes.append(helper.make_node("Clip", [f"c{k}", "lo", "hi"], [f"y{k}"]))
        else:
            nodes.append(helper.make_node(act, [f"c{k}"], [f"y{k}"]))
        last = f"y{k}"
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 60, 58])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, ["y0", "y1", "y2", "y3"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = runtime.load_model(model)
    x = rng.standard_normal((1, c, 60, 58)).astype(np.float32) * 2
    got = runtime.Session(loaded, canary=True).prepare().run({"x": x})
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
    assert want is not None, notes
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
