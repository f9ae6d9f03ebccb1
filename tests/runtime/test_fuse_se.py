"""Load-time fusion of a squeeze-and-excitation block into memplan's SqueezeExcite: torch-like
blocks built with onnx.helper (each squeeze and gate activation as exporters spell them, both
Mul operand orders, with and without biases, after a plain Conv or a ConvAct), each run
against onnxruntime and onnx.reference on the compiled route and on numpy's; the blocks that
must be left alone; and the bytes beside the arena."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels import MEMPLAN_DOMAIN, get_kernel, squeeze_excite, supported_ops
from runtime.oracle import oracle_outputs

RNG = np.random.default_rng(41)
SQUEEZES = ["Relu", "Silu", "HardSwish", "Relu6", "none"]
GATES = ["Sigmoid", "HardSigmoid", "Clip"]


def _activation(kind: str, src: str, dst: str, tag: str, inits: list) -> list[onnx.NodeProto]:
    """The nodes of activation `kind` from `src` to `dst`, as torch exports it."""
    n = helper.make_node
    if kind == "Silu":
        return [n("Sigmoid", [src], [f"{tag}_sig"], name=f"{tag}_sig"), n("Mul", [src, f"{tag}_sig"], [dst], name=f"{tag}_mul")]  # fmt: skip
    if kind in ("Relu6", "Clip"):
        lo, hi = (0.0, 6.0) if kind == "Relu6" else (0.0, 1.0)
        inits += [numpy_helper.from_array(np.array(v, np.float32), f"{tag}_{k}") for k, v in (("lo", lo), ("hi", hi))]
        return [n("Clip", [src, f"{tag}_lo", f"{tag}_hi"], [dst], name=f"{tag}_clip")]
    if kind == "HardSigmoid":
        return [n("HardSigmoid", [src], [dst], name=f"{tag}_hs", alpha=1 / 6, beta=0.5)]
    if kind == "none":
        return [n("Identity", [src], [dst], name=f"{tag}_id")]
    return [n(kind, [src], [dst], name=f"{tag}_act")]


def se_model(
    squeeze: str = "Relu",
    gate: str = "HardSigmoid",
    *,
    swap: bool = False,
    bias: bool = True,
    also_read: str = "",
    batch: int = 2,
    channels: int = 12,
    hidden: int = 4,
    spatial: tuple[int, int] = (5, 7),
) -> onnx.ModelProto:
    """x -> Relu -> r; r -> GlobalAveragePool -> Conv 1x1 + squeeze -> Conv 1x1 + gate; y = r * gate
    (gate * r with `swap`); `also_read` names an intermediate that a second output reads."""
    n = helper.make_node
    inits = [
        numpy_helper.from_array((RNG.standard_normal((hidden, channels, 1, 1)) * 0.5).astype(np.float32), "w1"),
        numpy_helper.from_array((RNG.standard_normal((channels, hidden, 1, 1)) * 0.5).astype(np.float32), "w2"),
        numpy_helper.from_array(RNG.standard_normal(hidden).astype(np.float32), "b1"),
        numpy_helper.from_array(RNG.standard_normal(channels).astype(np.float32), "b2"),
    ]
    b1, b2 = (["b1"], ["b2"]) if bias else ([], [])
    squeeze_out = "s" if squeeze != "none" else "s_conv"
    nodes = [
        n("Relu", ["x"], ["r"], name="stem"),
        n("GlobalAveragePool", ["r"], ["p"], name="pool"),
        n("Conv", ["p", "w1", *b1], ["s_conv"], name="squeeze"),
        *([] if squeeze == "none" else _activation(squeeze, "s_conv", "s", "sq", inits)),
        n("Conv", [squeeze_out, "w2", *b2], ["g_conv"], name="expand"),
        *_activation(gate, "g_conv", "g", "gate", inits),
        n("Mul", ["g", "r"] if swap else ["r", "g"], ["y"], name="scale"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, channels, *spatial])]
    if also_read:
        nodes.append(n("Neg", [also_read], ["z"], name="also"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, "zc", "z0", "z1"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, *spatial])
    graph = helper.make_graph(nodes, "se", [x], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _compiled_calls(monkeypatch) -> list[int] | None:
    """Counts calls of the compiled loop; None when compiled loops are off (no numba, or
    MEMPLAN_JIT=0: the cases still run, on numpy's route)."""
    if squeeze_excite._se is None:
        return None
    calls: list[int] = []
    loop = squeeze_excite._se

    def counted(*args):
        calls.append(1)
        return loop(*args)

    monkeypatch.setattr(squeeze_excite, "_se", counted)
    return calls


def _run_against_oracles(model: onnx.ModelProto, *, batch: int = 2) -> runtime.Graph:
    graph = runtime.load_model(model)
    x = (RNG.standard_normal(graph.tensors["x"].shape) * 2).astype(np.float32)
    without = runtime.MemoryOptions(workspace=False)
    sessions = [runtime.Session(graph, canary=True).prepare(), runtime.Session(graph, options=without).prepare()]
    for prefer in ("onnxruntime", "reference"):
        name, want, notes = oracle_outputs(model.SerializeToString(), {"x": x}, prefer=prefer)
        assert want is not None and name is not None and prefer in name, notes
        for session in sessions:
            got = session.run({"x": x})
            for key, value in want.items():
                np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5, err_msg=f"{key} against {name}")
    return graph


def _ops(graph: runtime.Graph) -> list[tuple[str, str]]:
    return [(n.op_type, n.domain) for n in graph.nodes]


@pytest.mark.parametrize("swap", [False, True], ids=["x*gate", "gate*x"])
@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("squeeze", SQUEEZES)
def test_block_fused_matches_the_oracles_compiled(monkeypatch, squeeze, gate, swap):
    calls = _compiled_calls(monkeypatch)
    graph = _run_against_oracles(se_model(squeeze, gate, swap=swap))
    assert graph.fusions["squeeze_excite"] == 1
    assert ("SqueezeExcite", MEMPLAN_DOMAIN) in _ops(graph)
    assert not {"p", "s", "s_conv", "g", "g_conv"} & set(graph.tensors)
    assert calls is None or calls, "the compiled loop did not run"


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("squeeze", SQUEEZES)
def test_block_fused_matches_the_oracles_on_numpy_route(monkeypatch, squeeze, gate):
    monkeypatch.setattr(squeeze_excite, "_se", None)
    graph = _run_against_oracles(se_model(squeeze, gate, swap=True))
    assert graph.fusions["squeeze_excite"] == 1


@pytest.mark.parametrize("numpy_route", [False, True], ids=["compiled", "numpy"])
@pytest.mark.parametrize(
    "shape",
    [dict(batch=1, channels=16, hidden=8, spatial=(56, 56)), dict(batch=3, channels=40, hidden=1, spatial=(1, 1))],
    ids=["mobilenet-like", "one-hidden-one-pixel"],
)
def test_shapes_and_no_biases(monkeypatch, numpy_route, shape):
    if numpy_route:
        monkeypatch.setattr(squeeze_excite, "_se", None)
    for bias in (True, False):
        graph = _run_against_oracles(se_model("Silu", "Sigmoid", bias=bias, **shape))
        assert graph.fusions["squeeze_excite"] == 1


@pytest.mark.parametrize("numpy_route", [False, True], ids=["compiled", "numpy"])
def test_written_over_its_input_where_the_input_dies(monkeypatch, numpy_route):
    if numpy_route:
        monkeypatch.setattr(squeeze_excite, "_se", None)
    model = se_model("Relu", "HardSigmoid")
    graph = _run_against_oracles(model)  # default options: planned in place
    problem = runtime.memory_problem(graph)
    links = {b.id: b.alias_of for b in problem.buffers if b.alias_of is not None}
    assert links.get("y") == "r", links


@pytest.mark.parametrize("also_read", ["p", "s", "g"], ids=["pool", "squeeze", "gate"])
def test_an_intermediate_read_elsewhere_is_not_fused(also_read):
    graph = _run_against_oracles(se_model("Silu", "Sigmoid", also_read=also_read))
    assert graph.fusions["squeeze_excite"] == 0
    assert "SqueezeExcite" not in [op for op, _ in _ops(graph)]


def test_a_map_scaled_by_a_gate_of_another_map_is_not_fused():
    model = se_model()
    mul = next(node for node in model.graph.node if node.name == "scale")
    mul.input[0] = "x"  # the gate comes from r, the map scaled is x
    graph = _run_against_oracles(model)
    assert graph.fusions["squeeze_excite"] == 0


def test_fusion_can_be_switched_off():
    model = se_model()
    assert runtime.load_model(model, fuse=False).fusions["squeeze_excite"] == 0
    fused = runtime.memory_problem(runtime.load_model(model))
    plain = runtime.memory_problem(runtime.load_model(model, fuse=False))
    assert len(fused.buffers) < len(plain.buffers)


def test_little_beside_the_arena():
    model = se_model("HardSwish", "HardSigmoid", batch=1, channels=96, hidden=24, spatial=(14, 14))
    graph = runtime.load_model(model)
    session = runtime.Session(graph, "greedy_by_size").prepare()
    x = RNG.standard_normal(graph.tensors["x"].shape).astype(np.float32)
    session.run({"x": x})  # numpy sets its own machinery up on a first call
    got = session.run({"x": x}, measure="memory")
    outside, arena = session.stats.outside_arena_bytes, session.stats.arena_bytes
    assert outside is not None and outside <= max(arena // 100, 64 * 1024), (outside, arena)
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x})
    assert want is not None, notes
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-5)


def test_an_activation_the_kernel_does_not_take_is_named():
    with pytest.raises(ValueError, match="Gelu.*accepted"):
        squeeze_excite._activations(np.dtype(np.float32), "Gelu", "Sigmoid", (0.0,) * 8)


def test_squeeze_excite_is_memplans_own_op_not_an_onnx_one():
    assert "SqueezeExcite" not in supported_ops() and get_kernel("SqueezeExcite") is None
    assert get_kernel("SqueezeExcite", MEMPLAN_DOMAIN) is not None
