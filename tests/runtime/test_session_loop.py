"""The Session's loop of bound calls: every step's kernel call is bound at prepare (views,
workspace, attributes, opset), so a run reads only its input slots. The plain loop (no canary,
hook or callback) and the full loop must compute the same outputs as onnxruntime, with omitted
optional inputs, several outputs, views skipped, outputs outside the arena; a failing kernel is
named in either loop; and each run's trace has one record per step, in order."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime import ExecutionError, MemoryOptions, Session, load_model
from runtime.oracle import oracle_outputs

RNG = np.random.default_rng(23)


def mixed_model() -> onnx.ModelProto:
    """Clip with its min omitted, Split into two outputs, a Reshape view, an opset-dependent
    Softmax and a Conv with workspace; two graph outputs."""
    inits = [
        numpy_helper.from_array(np.array(0.5, np.float32), "hi"),
        numpy_helper.from_array(np.array([4, 4], np.int64), "halves"),
        numpy_helper.from_array(np.array([2, -1], np.int64), "flat"),
        numpy_helper.from_array(RNG.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Clip", ["x", "", "hi"], ["c"], name="clip"),
        helper.make_node("Split", ["c", "halves"], ["a", "b"], name="split", axis=1),
        helper.make_node("Conv", ["a", "w"], ["k"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["k", "b"], ["m"], name="mul"),
        helper.make_node("Reshape", ["m", "flat"], ["f"], name="flatten"),
        helper.make_node("Softmax", ["f"], ["y"], name="softmax", axis=-1),
        helper.make_node("Neg", ["b"], ["z"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 5, 5])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 100]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4, 5, 5]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("loop", ["plain", "with_events"])
@pytest.mark.parametrize("io", ["arena", "external"])
def test_both_loops_match_onnxruntime(io, loop):
    model = mixed_model()
    x = RNG.standard_normal((2, 8, 5, 5)).astype(np.float32)
    _, want, notes = oracle_outputs(model.SerializeToString(), {"x": x}, prefer="onnxruntime")
    assert want is not None, notes
    session = Session(load_model(model), "greedy_by_size", MemoryOptions(io=io)).prepare()
    events: list[tuple[int, int, str]] = []
    on_step = (lambda i, n, name, seconds: events.append((i, n, name))) if loop == "with_events" else None
    for _ in range(2):  # a second run reads the slots the first one left
        got = session.run({"x": x}, on_step=on_step)
        for name in ("y", "z"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    names = ["clip", "split", "conv", "mul", "flatten", "softmax", "neg"]
    assert [r.node for r in session.stats.trace] == names
    assert [r.index for r in session.stats.trace] == list(range(len(names)))
    assert session.stats.trace[2].op_type == "Conv"
    seconds = session.stats.step_seconds
    assert len(seconds) == len(names) and min(seconds) >= 0 and sum(seconds) <= session.stats.seconds
    if loop == "with_events":
        assert events == [(i, len(names), n) for i, n in enumerate(names)] * 2


def gather_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Gather", ["r", "i"], ["y"], name="pick", axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "gather",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("loop", ["plain", "with_events"])
def test_a_failing_kernel_is_named_in_either_loop(loop):
    session = Session(load_model(gather_model())).prepare()
    x = np.ones((4, 3), np.float32)
    on_step = (lambda *args: None) if loop == "with_events" else None
    got = session.run({"x": x, "i": np.array([3, 0], np.int64)}, on_step=on_step)
    np.testing.assert_array_equal(got["y"], np.ones((2, 3), np.float32))
    with pytest.raises(ExecutionError, match=r"node 'pick' \(Gather\) failed") as caught:
        session.run({"x": x, "i": np.array([7, 0], np.int64)}, on_step=on_step)
    assert caught.value.node == "pick"


def test_an_omitted_input_in_the_middle_reads_none():
    # Clip(-x, min omitted, max): the kernel must see None for min, not some other tensor (with x
    # as min it would compute |x|).
    hi = numpy_helper.from_array(np.array(0.5, np.float32), "hi")
    nodes = [
        helper.make_node("Neg", ["x"], ["n"], name="neg"),
        helper.make_node("Clip", ["n", "", "hi"], ["y"], name="clip"),
    ]
    graph = helper.make_graph(
        nodes,
        "clip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
        [hi],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    got = Session(load_model(model)).prepare().run({"x": x})
    np.testing.assert_array_equal(got["y"], np.minimum(-x, np.float32(0.5)))


def mobile_block() -> onnx.ModelProto:
    """A 1x1 expansion with Relu (ConvAct), a depthwise 3x3 with Relu, a squeeze-and-excite, a
    1x1 projection added to the block's input (PointwiseConvAdd) and a GlobalAveragePool: each
    bound call that derives views from its arrays (`SameArrays`)."""
    c, e, s = 8, 24, 4
    weights = {"w1": (e, c, 1, 1), "wd": (e, 1, 3, 3), "ws1": (s, e, 1, 1), "ws2": (e, s, 1, 1), "w2": (c, e, 1, 1)}
    inits = [numpy_helper.from_array((RNG.standard_normal(v) * 0.3).astype(np.float32), k) for k, v in weights.items()]
    inits += [numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), f"b{n}") for n in (c, e, s)]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", f"b{e}"], ["h"], name="expand"),
        n("Relu", ["h"], ["hr"], name="expand_relu"),
        n("Conv", ["hr", "wd", f"b{e}"], ["d"], name="dw", group=e, pads=[1, 1, 1, 1]),
        n("Relu", ["d"], ["dr"], name="dw_relu"),
        n("GlobalAveragePool", ["dr"], ["p"], name="se_pool"),
        n("Conv", ["p", "ws1", f"b{s}"], ["q"], name="se_squeeze"),
        n("Relu", ["q"], ["qr"], name="se_relu"),
        n("Conv", ["qr", "ws2", f"b{e}"], ["g"], name="se_expand"),
        n("Sigmoid", ["g"], ["gs"], name="se_gate"),
        n("Mul", ["dr", "gs"], ["sc"], name="se_scale"),
        n("Conv", ["sc", "w2", f"b{c}"], ["pr"], name="project"),
        n("Add", ["pr", "x"], ["r"], name="residual"),
        n("GlobalAveragePool", ["r"], ["y"], name="head_pool"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 14, 14])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 1, 1])
    graph = helper.make_graph(nodes, "mobile_block", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_bound_calls_are_primed_at_prepare_so_the_first_traced_run_allocates_no_more():
    model = mobile_block()
    graph = load_model(model)
    x = RNG.standard_normal((1, 8, 14, 14)).astype(np.float32)
    session = Session(graph).prepare()
    first = session.run({"x": x}, measure="memory")
    first_bytes = session.stats.outside_arena_bytes
    session.run({"x": x}, measure="memory")
    assert first_bytes is not None and session.stats.outside_arena_bytes is not None
    assert first_bytes <= session.stats.outside_arena_bytes + 512, (first_bytes, session.stats.outside_arena_bytes)
    name, want, notes = oracle_outputs(model.SerializeToString(), {"x": x}, prefer="onnxruntime")
    assert want is not None, notes
    np.testing.assert_allclose(first["y"], want["y"], rtol=1e-4, atol=1e-5)
