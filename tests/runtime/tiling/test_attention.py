"""Attention in blocks of query rows (`runtime.tiling.attention`) on a small generated attention
block (sequence 30, two heads): found, run block by block inside its planned arena and checked
against onnxruntime and the untiled run; its arena falls; `tile_auto` takes it only when it does."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import planner
from runtime import MemoryOptions, Session, load_model, memory_problem
from runtime.tiling import tile_auto
from runtime.tiling.attention import METHOD, attentions, blocked_graph, tile_attention
from tests.runtime.kernels.harness import close

SEQ, WIDTH, HEADS = 30, 16, 2
# Blocks of query rows against whole matrices: the same sums, which a BLAS may order otherwise for
# another block height (its edge kernels, fused multiply-adds); scores, softmax and probs @ V each
# sum at most SEQ terms.
ORDER_RTOL = 2 * SEQ * float(np.finfo(np.float32).eps)
EXTERNAL = MemoryOptions(io="external")


def attention_model(*, mask: str = "causal", scores_out: bool = False, layers: int = 2) -> onnx.ModelProto:
    """`layers` times: x (1, SEQ, WIDTH) -> Q, K, V projections -> MatMul(Q, K^T) / sqrt(d) + mask ->
    Softmax -> by V -> (1, SEQ, WIDTH), every layer with the same weights and mask. `mask`: "causal"
    (a constant SEQ x SEQ), "padding" (an input (1, 1, 1, SEQ), the same for every row) or "rows" (an
    input (1, 1, SEQ, SEQ), a row per query)."""
    rng = np.random.default_rng(3)
    head = WIDTH // HEADS
    inits = {f"w{n}": rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * 0.3 for n in "qkv"}
    inits["split"] = np.array([1, SEQ, HEADS, head], np.int64)
    inits["merge"] = np.array([1, SEQ, WIDTH], np.int64)
    inits["scale"] = np.array(np.sqrt(head), np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, WIDTH])]
    if mask == "causal":
        inits["mask"] = np.where(np.tril(np.ones((SEQ, SEQ), bool)), 0.0, -1e9).astype(np.float32)
    else:
        shape = [1, 1, 1, SEQ] if mask == "padding" else [1, 1, SEQ, SEQ]
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, shape))
    nodes = []
    for layer in range(layers):
        x, p = ("x" if layer == 0 else f"y{layer - 1}"), f"l{layer}_"
        for n, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            nodes += [
                helper.make_node("MatMul", [x, f"w{n}"], [f"{p}{n}_flat"]),
                helper.make_node("Reshape", [f"{p}{n}_flat", "split"], [f"{p}{n}_heads"]),
                helper.make_node("Transpose", [f"{p}{n}_heads"], [f"{p}{n}"], perm=perm),
            ]
        y = "y" if layer == layers - 1 else f"y{layer}"
        nodes += [
            helper.make_node("MatMul", [f"{p}q", f"{p}k"], [f"{p}scores"]),
            helper.make_node("Div", [f"{p}scores", "scale"], [f"{p}scaled"]),
            helper.make_node("Add", [f"{p}scaled", "mask"], [f"{p}masked"]),
            helper.make_node("Softmax", [f"{p}masked"], [f"{p}probs"], axis=-1),
            helper.make_node("MatMul", [f"{p}probs", f"{p}v"], [f"{p}att"]),
            helper.make_node("Transpose", [f"{p}att"], [f"{p}att_t"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [f"{p}att_t", "merge"], [y]),
        ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, WIDTH])]
    if scores_out:  # every layer's scores read by the graph's caller too
        outputs += [
            helper.make_tensor_value_info(f"l{layer}_scores", TensorProto.FLOAT, [1, HEADS, SEQ, SEQ])
            for layer in range(layers)
        ]
    graph = helper.make_graph(
        nodes, "attention", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds_of(mask: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((1, SEQ, WIDTH)).astype(np.float32)}
    if mask == "padding":
        feeds["mask"] = np.where(np.arange(SEQ) < SEQ - 6, 0.0, -1e4).astype(np.float32).reshape(1, 1, 1, SEQ)
    elif mask == "rows":
        feeds["mask"] = (rng.standard_normal((1, 1, SEQ, SEQ)) * 2).astype(np.float32)
    return feeds


def _run(graph, feeds) -> tuple[dict[str, np.ndarray], int]:
    plan = planner.plan(memory_problem(graph, EXTERNAL), "greedy_by_size")
    session = Session(graph, plan, EXTERNAL, canary=True).prepare()
    return session.run(feeds), plan.arena_bytes


@pytest.mark.parametrize("mask", ["causal", "padding", "rows"])
def test_blocks_match_onnxruntime_and_the_untiled_run_in_a_smaller_arena(mask):
    model = attention_model(mask=mask)
    graph = load_model(model)
    feeds = feeds_of(mask)
    found = attentions(graph)
    assert [[n.op_type for n in a.nodes] for a in found] == [["MatMul", "Div", "Add", "Softmax", "MatMul"]] * 2
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    untiled, untiled_arena = _run(graph, feeds)
    blocked = blocked_graph(graph, 8)  # 4 blocks a layer, the last of 6 rows
    assert sum(n.op_type == "Softmax" for n in blocked.nodes) == 8
    assert all(t.shape[2] <= 8 for t in blocked.tensors.values() if t.shape[-2:-1] and "probs" in t.name)
    got, arena = _run(blocked, feeds)
    close([got["y"]], [want], rtol=1e-4, atol=1e-5)
    close([got["y"]], [untiled["y"]], rtol=ORDER_RTOL, atol=1e-6)
    assert arena < untiled_arena


def test_tile_auto_takes_the_blocks_only_when_the_arena_falls():
    graph = load_model(attention_model())
    untiled = planner.plan(memory_problem(graph, EXTERNAL), "greedy_by_size").arena_bytes
    tiling = tile_auto(graph, EXTERNAL)
    field = tiling.to_json()
    assert field is not None and field["stages"][0]["method"] == METHOD and field["stages"][0]["tiles"] > 1
    assert field["arena_bytes_untiled"] == untiled
    tiled = planner.plan(memory_problem(tiling.graph, EXTERNAL), "greedy_by_size").arena_bytes
    assert tiled < untiled
    got, _ = _run(tiling.graph, feeds_of("causal"))
    want, _ = _run(graph, feeds_of("causal"))
    close([got["y"]], [want["y"]], rtol=ORDER_RTOL, atol=1e-6)


def test_scores_read_elsewhere_are_not_blocked_and_the_model_stays_untiled():
    graph = load_model(attention_model(scores_out=True))
    assert attentions(graph) == []
    assert tile_attention(graph, EXTERNAL) is None
    assert tile_auto(graph, EXTERNAL).to_json() is None


def test_a_stored_choice_makes_the_same_blocks_again():
    """A run of a stored plan tiles the model again from the plan's choice (`app.services.tiling`)."""
    from app.services.tiling import apply_choice, tile_choice

    graph = load_model(attention_model())
    tiling = tile_auto(graph, EXTERNAL)
    again = apply_choice(graph, tile_choice(tiling))
    assert [n.name for n in again.nodes] == [n.name for n in tiling.graph.nodes]
