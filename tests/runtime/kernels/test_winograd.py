"""Dense 3x3 stride-1 Conv by Winograd's F(2x2, 3x3) and F(4x4, 3x3) (`runtime.kernels.conv.winograd`)
against onnx.reference: pads 0, 1, asymmetric and auto_pad SAME, odd and even sizes, tiny maps, batch
2, with and without bias, Conv and each activation ConvAct fuses; the route asserted taken
(or, with compiled loops off, not taken, and the numpy route still right); scratch filled
with NaN so that a value read before written shows; the weight changed between calls and
between a session's runs (its transform is never kept from an earlier call)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime import Session
from runtime.graph import load_model
from runtime.kernels.conv import jit_conv, jit_winograd, winograd
from tests.runtime.kernels.harness import CONV_ACT_IDS, CONV_ACTS, call_conv, conv_data, conv_reference

needs_jit = pytest.mark.skipif(jit_winograd.inputs is None, reason="compiled loops off or numba missing")

SHAPES = [  # (x shape, w shape, Conv attributes)
    ((1, 5, 11, 9), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 10, 12), (6, 4, 3, 3), {}),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"pads": [0, 1, 2, 1]}),
    ((1, 6, 7, 10), (5, 6, 3, 3), {"auto_pad": "SAME_UPPER"}),
    ((2, 3, 8, 7), (3, 3, 3, 3), {"auto_pad": "SAME_LOWER"}),
    ((1, 4, 3, 3), (5, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 2, 1, 1), (3, 2, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 3, 4, 5), (2, 3, 3, 3), {"pads": [2, 0, 0, 2]}),
]
SHAPE_IDS = [
    "pad1-odd",
    "pad0-even-batch2",
    "asymmetric",
    "same-upper",
    "same-lower-batch2",
    "3x3-map",
    "1x1-map",
    "wide-pads",
]


@pytest.fixture(params=[2, 4], ids=["F2", "F4"])
def calls(request, monkeypatch):
    """Every map takes Winograd (not only large ones), F(2x2, 3x3) or F(4x4, 3x3) as the
    parameter says; counts the calls of the real route."""
    monkeypatch.setattr(winograd, "MIN_PIXELS", 1)
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 1)
    monkeypatch.setattr(winograd, "F4_MIN_PIXELS", 1 if request.param == 4 else 1 << 30)
    count = []
    real = winograd.conv_winograd

    def counted(*args, **kwargs):
        count.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(winograd, "conv_winograd", counted)
    return count


@needs_jit
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize(("act", "nodes"), CONV_ACTS, ids=CONV_ACT_IDS)
def test_winograd_matches_the_conv_reference(x_shape, w_shape, attrs, act, nodes, bias, calls):
    x, w, b = conv_data(x_shape, w_shape, bias, 4300)
    want = conv_reference(x, w, b, attrs, nodes)
    got = np.full(want.shape, np.nan, np.float32)
    call_conv("ConvAct" if act else "Conv", x, w, b, got, {**attrs, **act})
    assert calls, "the Winograd route was not taken"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_jit
@pytest.mark.parametrize(("height", "tile"), [(30, 4), (20, 2)], ids=["F4", "F2"])
def test_large_map_takes_winograd_by_default_in_bands(height, tile, monkeypatch):
    """A 30x29 map (F(4x4) by default) and a 20x29 one (F(2x2)) with a band budget of a few tile
    rows: several bands, the last one shorter."""
    calls = []
    real = winograd.conv_winograd

    def counted(x, w, b, out, geo, *args, **kwargs):
        calls.append(winograd.tile_of(geo, x.shape, w.shape))
        real(x, w, b, out, geo, *args, **kwargs)

    monkeypatch.setattr(winograd, "conv_winograd", counted)
    # F(2x2): bands of 4 of the 10 tile rows (16 positions x 32 channels x 15 tiles a row);
    # F(4x4): bands of 3 of the 8 rows (36 positions x 32 channels x 8 tiles a row)
    monkeypatch.setattr(winograd.window, "IM2COL_BLOCK_BYTES", 2 * 2 * 16 * (16 + 16) * 15 * 4)
    x, w, b = conv_data((2, 16, height, 29), (16, 16, 3, 3), True, 4300)
    attrs = {"pads": [1, 1, 1, 1]}
    want = conv_reference(x, w, b, attrs, [("Relu", {})])
    got = np.full(want.shape, np.nan, np.float32)
    call_conv("ConvAct", x, w, b, got, {**attrs, "activation": "Relu"})
    assert calls == [tile]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), SHAPES[:4], ids=SHAPE_IDS[:4])
def test_compiled_loops_off_takes_the_numpy_route(x_shape, w_shape, attrs, calls, monkeypatch):
    monkeypatch.setattr(jit_winograd, "inputs", None)
    monkeypatch.setattr(jit_conv, "im2col_band", None)
    x, w, b = conv_data(x_shape, w_shape, True, 4300)
    want = conv_reference(x, w, b, attrs, [])
    got = np.full(want.shape, np.nan, np.float32)
    call_conv("Conv", x, w, b, got, attrs)
    assert not calls
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@needs_jit
def test_weight_changed_between_calls_is_used(calls):
    """Same workspace, same weight array changed in place: the second call uses the new values."""
    x, w, b = conv_data((1, 4, 8, 8), (5, 4, 3, 3), True, 4300)
    attrs = {"pads": [1, 1, 1, 1]}
    got = np.empty((1, 5, 8, 8), np.float32)
    ws = call_conv("Conv", x, w, b, got, attrs)
    w *= -2.0
    call_conv("Conv", x, w, b, got, attrs, ws=ws)
    assert len(calls) == 2
    np.testing.assert_allclose(got, conv_reference(x, w, b, attrs, []), rtol=1e-4, atol=1e-4)


def _conv_model(w: np.ndarray) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 0, 0, 0])],  # smaller output: never over its input
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[1], 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, w.shape[0], 14, 14])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@needs_jit
def test_shared_weight_is_never_stale_across_sessions(calls):
    """A weight declared unbound (shared parameters) bound to different arrays in two sessions
    of one model, each run twice: each session's output follows its own weight."""
    x, w, _ = conv_data((1, 4, 16, 16), (6, 4, 3, 3), False, 4300)
    graph = load_model(_conv_model(w))
    for scale in (1.0, -3.0):
        weight = (w * scale).astype(np.float32)
        session = Session(graph, unbound=["w"]).prepare()
        session.set_shared_input("w", weight)
        for _ in range(2):
            y = session.run({"x": x})["y"]
            np.testing.assert_allclose(y, conv_reference(x, weight, None, {}, []), rtol=1e-4, atol=1e-4)
    assert calls


def _conv_relu_model(w: np.ndarray, b: np.ndarray) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, w.shape[1], 16, 15])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, w.shape[0], 16, 15])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@needs_jit
def test_constant_weight_is_transformed_once_at_prepare(calls, monkeypatch):
    """A constant weight's transform is made when the session prepares (counted with its
    constants) and every run reuses it: no weight transform in a run, outputs still right."""
    x, w, b = conv_data((2, 6, 16, 15), (8, 6, 3, 3), True, 4300)
    session = Session(load_model(_conv_relu_model(w, b))).prepare()
    prepared = [s.constants["winograd_u"] for s in session._steps if "winograd_u" in s.constants]
    assert len(prepared) == 1 and session.constant_bytes >= w.nbytes + b.nbytes + prepared[0].nbytes
    transforms = []
    real = jit_winograd.weights
    monkeypatch.setattr(jit_winograd, "weights", lambda *a: (transforms.append(1), real(*a)))
    for _ in range(2):
        y = session.run({"x": x})["y"]
        np.testing.assert_allclose(
            y, conv_reference(x, w, b, {"pads": [1, 1, 1, 1]}, [("Relu", {})]), rtol=1e-4, atol=1e-4
        )
    assert not transforms


@needs_jit
def test_unbound_weight_gets_no_prepared_transform(calls):
    x, w, b = conv_data((2, 6, 16, 15), (8, 6, 3, 3), True, 4300)
    session = Session(load_model(_conv_relu_model(w, b)), unbound=["w"]).prepare()
    assert not any(s.constants for s in session._steps)
    weight = -w
    session.set_shared_input("w", weight)
    y = session.run({"x": x})["y"]
    np.testing.assert_allclose(
        y, conv_reference(x, weight, b, {"pads": [1, 1, 1, 1]}, [("Relu", {})]), rtol=1e-4, atol=1e-4
    )
    assert calls  # transformed per call


@needs_jit
@pytest.mark.parametrize(
    "pads", [[1, 1, 1, 1], [2, 0, 0, 2], [0, 2, 2, 0], [1, 0, 1, 2]], ids=["1", "top2", "bottom2", "mixed"]
)
@pytest.mark.parametrize(
    ("shape", "filters"),
    [((1, 6, 13, 11), 6), ((2, 6, 12, 9), 6), ((1, 6, 12, 9), 9), ((1, 7, 11, 10), 4)],
    ids=["odd", "even-batch2", "more-filters", "fewer-filters"],
)
@pytest.mark.parametrize(("act", "nodes"), CONV_ACTS[:2] + CONV_ACTS[-1:], ids=CONV_ACT_IDS[:2] + CONV_ACT_IDS[-1:])
def test_over_its_own_input_matches_the_conv_reference(shape, filters, pads, act, nodes, calls, monkeypatch):
    """Output from the input's first byte (as planned over a dying input): bands of one or two
    tile rows, so that each band overwrites rows the next one reads (saved aside first)."""
    x, w, b = conv_data(shape, (filters, shape[1], 3, 3), True, 4300)
    attrs = {"pads": pads}
    want = conv_reference(x, w, b, attrs, nodes)
    block = np.zeros(max(x.size, want.size), np.float32)
    block[: x.size] = x.reshape(-1)
    view_x, out = block[: x.size].reshape(x.shape), block[: want.size].reshape(want.shape)
    monkeypatch.setattr(winograd.window, "IM2COL_BLOCK_BYTES", 2 * 16 * 12 * 6 * 4 * 2)  # two tile rows a band
    call_conv("ConvAct" if act else "Conv", view_x, w, b, out, {**attrs, **act})
    assert calls
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@needs_jit
@pytest.mark.parametrize("unbound", [False, True], ids=["constant", "unbound"])
def test_weight_too_large_for_the_workspace_takes_winograd_only_when_prepared(unbound, calls, monkeypatch):
    """Weights whose transform is not made per call (`winograd.per_call`): a constant one
    runs by Winograd from its prepared transform, a shared one by im2col; both right."""
    monkeypatch.setattr(winograd, "WEIGHTS_PER_CALL_BYTES", 0)
    x, w, b = conv_data((2, 6, 16, 15), (8, 6, 3, 3), True, 4300)
    session = Session(load_model(_conv_relu_model(w, b)), unbound=["w"] if unbound else ()).prepare()
    if unbound:
        session.set_shared_input("w", w)
    y = session.run({"x": x})["y"]
    np.testing.assert_allclose(y, conv_reference(x, w, b, {"pads": [1, 1, 1, 1]}, [("Relu", {})]), rtol=1e-4, atol=1e-4)
    assert bool(calls) is not unbound


@needs_jit
@pytest.mark.parametrize(("unbound", "tile"), [(False, 4), (True, 2)], ids=["constant-F4", "unbound-F2"])
def test_weight_too_large_for_f4_per_call_keeps_f2(unbound, tile, monkeypatch):
    """A map F(4x4) takes, with a weight whose F(4x4) transform (36 K C floats) is too large to
    make per call but whose F(2x2) one (16 K C) is not: a constant weight runs F(4x4) from its
    prepared transform, a shared one F(2x2) per call (not im2col); both right."""
    monkeypatch.setattr(winograd, "MIN_PIXELS", 1)
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 1)
    monkeypatch.setattr(winograd, "F4_MIN_PIXELS", 1)
    x, w, b = conv_data((2, 6, 16, 15), (8, 6, 3, 3), True, 4300)
    monkeypatch.setattr(winograd, "WEIGHTS_PER_CALL_BYTES", 16 * 8 * 6 * 4)
    tiles = []
    real = winograd.conv_winograd

    def counted(x, w, b, out, geo, *args, **kwargs):
        tiles.append(winograd.tile_of(geo, x.shape, w.shape, prepared=args[2] is not None))
        real(x, w, b, out, geo, *args, **kwargs)

    monkeypatch.setattr(winograd, "conv_winograd", counted)
    session = Session(load_model(_conv_relu_model(w, b)), unbound=["w"] if unbound else ()).prepare()
    if unbound:
        session.set_shared_input("w", w)
    y = session.run({"x": x})["y"]
    np.testing.assert_allclose(y, conv_reference(x, w, b, {"pads": [1, 1, 1, 1]}, [("Relu", {})]), rtol=1e-4, atol=1e-4)
    assert tiles == [tile]
