"""Dense convs planned over their dying input (`runtime.kernels.conv.over`), on whole models:
a ResNet-18-like and a MobileNetV2-like network built with onnx.helper, planned by every
strategy (each plan checked by `planner.check_plan`, the aliases by `alias_hazards`), run with
the canary poisoning every free byte, against onnxruntime. The alias lowers LOAD where the
peak step holds such a conv, is switched off with ``MemoryOptions(inplace=False)``, and is
refused where the argument does not hold (stride 2, two items with more output channels,
groups); an alias asked for by hand there is named a hazard."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import planner
from runtime import MemoryOptions, PlanError, Session, load_model, memory_problem
from runtime.inplace import alias_hazards
from runtime.kernels.conv import routes as conv_routes
from runtime.problem import check_aliases

RNG = np.random.default_rng(29)
LIKE = MemoryOptions(io="external", workspace=False)


class Builder:
    """Nodes and initializers of a small CNN, named in order."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def conv(self, x: str, cin: int, cout: int, k: int, *, stride: int = 1, group: int = 1, name: str) -> str:
        w = numpy_helper.from_array(
            (RNG.standard_normal((cout, cin // group, k, k)) / (k * cin**0.5)).astype(np.float32), f"{name}.w"
        )
        b = numpy_helper.from_array((RNG.standard_normal(cout) * 0.1).astype(np.float32), f"{name}.b")
        self.inits += [w, b]
        attrs = {"pads": [k // 2] * 4, "strides": [stride, stride], "group": group}
        self.nodes.append(helper.make_node("Conv", [x, w.name, b.name], [name], name=name, **attrs))
        return name

    def op(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def relu6(self, x: str, name: str) -> str:
        if "six" not in {t.name for t in self.inits}:
            self.inits += [
                numpy_helper.from_array(np.float32(0), "zero"),
                numpy_helper.from_array(np.float32(6), "six"),
            ]
        return self.op("Clip", [x, "zero", "six"], name)

    def model(self, x: str, shape: list[int], y: str, y_shape: list[int], name: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)],
            self.inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def resnet_like(batch: int = 1) -> onnx.ModelProto:
    """Stem (3x3 stride 2), two basic blocks (3x3 convs and a residual Add), a downsampling
    block with a 1x1 stride-2 projection, a widening 3x3 conv with its Relu, global pooling
    and a classifier."""
    g = Builder()
    h = g.op("Relu", [g.conv("x", 3, 16, 3, stride=2, name="stem")], "stem_relu")
    for i in range(2):
        a = g.op("Relu", [g.conv(h, 16, 16, 3, name=f"b{i}c1")], f"b{i}r1")
        h = g.op("Relu", [g.op("Add", [g.conv(a, 16, 16, 3, name=f"b{i}c2"), h], f"b{i}add")], f"b{i}out")
    a = g.op("Relu", [g.conv(h, 16, 32, 3, stride=2, name="d_c1")], "d_r1")
    skip = g.conv(h, 16, 32, 1, stride=2, name="d_proj")
    h = g.op("Relu", [g.op("Add", [g.conv(a, 32, 32, 3, name="d_c2"), skip], "d_add")], "d_out")
    h = g.op("Relu", [g.conv(h, 32, 48, 3, name="tail")], "tail_relu")  # fused: a ConvAct over d_out
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [h], "gap")], "flat")
    g.inits.append(numpy_helper.from_array(RNG.standard_normal((10, 48)).astype(np.float32), "fc.w"))
    g.op("Gemm", [pooled, "fc.w"], "y", transB=1)
    return g.model("x", [batch, 3, 32, 32], "y", [batch, 10], "resnet_like")


def mobilenet_like(batch: int = 1) -> onnx.ModelProto:
    """Stem, then inverted residual blocks: 1x1 expansion (x6), depthwise 3x3, 1x1 projection,
    a residual Add where shapes allow, and a 5x5 'same' conv head."""
    g = Builder()
    h = g.relu6(g.conv("x", 3, 8, 3, stride=2, name="stem"), "stem_act")
    cin = 8
    for i, (cout, stride) in enumerate([(8, 1), (16, 2), (16, 1)]):
        e = g.relu6(g.conv(h, cin, cin * 6, 1, name=f"m{i}exp"), f"m{i}e")
        d = g.relu6(g.conv(e, cin * 6, cin * 6, 3, stride=stride, group=cin * 6, name=f"m{i}dw"), f"m{i}d")
        p = g.conv(d, cin * 6, cout, 1, name=f"m{i}proj")
        h = g.op("Add", [p, h], f"m{i}add") if stride == 1 and cin == cout else p
        cin = cout
    g.op("Relu", [g.conv(h, 16, 24, 5, name="head")], "y")
    return g.model("x", [batch, 3, 32, 32], "y", [batch, 24, 8, 8], "mobilenet_like")


def _links(problem: planner.Problem) -> dict[str, tuple[str, int]]:
    return {b.id: (b.alias_of, b.alias_offset) for b in problem.buffers if b.alias_of is not None}


def _onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("build", [resnet_like, mobilenet_like])
def test_every_strategy_runs_the_model_with_convs_over_their_input_like_onnxruntime(build, batch):
    model = build(batch)
    graph = load_model(model)
    x = RNG.standard_normal((batch, 3, 32, 32)).astype(np.float32)
    want = _onnxruntime(model, x)
    for options in (LIKE, MemoryOptions()):
        problem = memory_problem(graph, options)
        convs = {n.outputs[0]: n for n in graph.nodes if n.op_type in ("Conv", "ConvAct")}
        over = [out for out, (src, _) in _links(problem).items() if out in convs and src == convs[out].inputs[0]]
        assert over, "no conv was planned over its input"
        assert alias_hazards(graph, problem) == []
        for strategy in planner.names():
            plan = planner.plan(problem, strategy)
            assert planner.check_plan(problem, plan).ok, strategy
            got = Session(graph, plan, options, canary=True).run({"x": x})["y"]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=strategy)


def test_the_resnet_blocks_convs_are_planned_over_their_input_and_lower_load(monkeypatch):
    graph = load_model(resnet_like())
    problem = memory_problem(graph, LIKE)
    links = _links(problem)
    nodes = {n.outputs[0]: n for n in graph.nodes}
    # The blocks' second 3x3 convs (fused with nothing: the Add follows) write over the first's output.
    assert links["b0c2"] == (nodes["b0c2"].inputs[0], 0) and links["b1c2"] == (nodes["b1c2"].inputs[0], 0)
    assert "d_c1" not in links  # stride 2: not over its input
    tail = next(n for n in graph.nodes if n.name.startswith("tail"))
    assert tail.op_type == "ConvAct" and links[tail.outputs[0]] == ("d_out", 0)  # 32 -> 48 channels, one item
    off = memory_problem(graph, LIKE.replace(inplace=False))
    assert set(_links(off)) == {"flat"}  # the view alone
    assert planner.load(problem) < planner.load(off)
    monkeypatch.setattr(conv_routes, "over_of", lambda *args: None)  # the form before dense convs went over their input
    without = memory_problem(graph, LIKE)
    assert "b0c2" not in _links(without)
    assert planner.load(problem) < planner.load(without), "the conv alias should lower LOAD here"


def test_the_mobilenet_expansion_is_planned_over_its_smaller_input_with_one_item_only():
    one, two = load_model(mobilenet_like(1)), load_model(mobilenet_like(2))
    links_one, links_two = _links(memory_problem(one, LIKE)), _links(memory_problem(two, LIKE))
    expansion = next(n for n in one.nodes if n.name.startswith("m1exp"))
    # 8 -> 48 channels: over its input for one item, never for two (item 0's output would
    # overwrite item 1's input before it is read).
    assert links_one.get(expansion.outputs[0]) == (expansion.inputs[0], 0)
    assert expansion.outputs[0] not in links_two
    projection = next(n for n in two.nodes if n.name.startswith("m1proj"))  # 48 -> 16: fine for two items
    assert links_two.get(projection.outputs[0]) == (projection.inputs[0], 0)


def _one_conv(batch: int, cin: int, cout: int, k: int, stride: int = 1, group: int = 1) -> onnx.ModelProto:
    """x -> Relu -> Conv -> Relu -> y: the conv's input dies at the conv."""
    g = Builder()
    g.op("Relu", [g.conv(g.op("Relu", ["x"], "r"), cin, cout, k, stride=stride, group=group, name="c")], "y")
    return g.model("x", [batch, cin, 12, 12], "y", [batch, cout, 12 // stride, 12 // stride], "one_conv")


REFUSED = [  # (batch, cin, cout, k, stride, group)
    (1, 8, 8, 3, 2, 1),
    (1, 8, 8, 1, 2, 1),
    (2, 4, 8, 1, 1, 1),
    (2, 4, 8, 3, 1, 1),
    (1, 8, 8, 3, 1, 2),
]


@pytest.mark.parametrize(
    ("batch", "cin", "cout", "k", "stride", "group"),
    REFUSED,
    ids=["stride2-3x3", "stride2-1x1", "N2-up-1x1", "N2-up-3x3", "group2"],
)
def test_the_alias_is_refused_where_the_argument_does_not_hold(batch, cin, cout, k, stride, group):
    graph = load_model(_one_conv(batch, cin, cout, k, stride, group), fuse=False)
    problem = memory_problem(graph, LIKE)
    assert "c" not in _links(problem)
    # Asked for by hand, the independent check names the hazard and the session refuses it.
    forced = _with_alias(problem, "c", "r")
    assert any("'c'" in h and "'r'" in h for h in alias_hazards(graph, forced))
    with pytest.raises(PlanError, match="unsafe alias"):
        check_aliases(graph, forced)


@pytest.mark.parametrize(("batch", "cin", "cout", "k"), [(1, 4, 8, 1), (2, 8, 4, 1), (1, 4, 8, 3), (2, 8, 4, 5)])
def test_the_alias_is_taken_where_it_holds_and_passes_the_check(batch, cin, cout, k):
    model = _one_conv(batch, cin, cout, k)
    graph = load_model(model, fuse=False)
    problem = memory_problem(graph, LIKE)
    assert _links(problem).get("c") == ("r", 0)
    assert alias_hazards(graph, problem) == []
    x = RNG.standard_normal((batch, cin, 12, 12)).astype(np.float32)
    got = Session(graph, "best", LIKE, canary=True).run({"x": x})["y"]
    np.testing.assert_allclose(got, _onnxruntime(model, x), rtol=1e-4, atol=1e-4)


def _with_alias(problem: planner.Problem, buffer_id: str, target: str) -> planner.Problem:
    bufs = [
        dataclasses.replace(b, alias_of=target, alias_offset=0) if b.id == buffer_id else b for b in problem.buffers
    ]
    return problem.replace(buffers=tuple(bufs))
