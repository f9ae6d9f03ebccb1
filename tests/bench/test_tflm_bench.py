"""bench/tflm_bench.py's measurements, checked against TensorFlow Lite Micro itself on the smallest model."""

from __future__ import annotations

import pytest

import planner
import runtime
from tests.runtime.tflite.shared import model_bytes

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime", reason="tflite-micro is not installed")


@pytest.fixture(scope="module")
def bench(bench_module):
    return bench_module("tflm_bench")


def test_the_minimum_arena_is_the_smallest_that_runs(bench):
    data = model_bytes("hello_world_int8")
    found = bench.min_arena(tflm, data, 1 << 16)
    assert found % bench.STEP == 0
    assert bench.runs(tflm, data, found) and not bench.runs(tflm, data, found - bench.STEP)


def test_elementwise_aliases_only_over_a_dying_input_of_the_same_shape(bench):
    graph = runtime.load_model(model_bytes("mobilenet_v2_quantized_1x3x224x224"))
    problem = runtime.memory_problem(graph, bench.FOR_TFLM)
    aliased = bench.tflm_safe_aliases(graph, problem)
    before = {b.id: b for b in problem.buffers}
    added = {b.id: b.alias_of for b in aliased.buffers if b.alias_of != before[b.id].alias_of}
    adds = [n for n in graph.nodes if n.op_type == "ADD"]
    assert adds and set(added) == {n.outputs[0] for n in adds}
    for node in adds:
        source = added[node.outputs[0]]
        assert source in node.inputs and before[source].last == graph.nodes.index(node)
        assert graph.tensors[source].shape == graph.tensors[node.outputs[0]].shape
    assert planner.check_plan(aliased, planner.plan(aliased, "greedy_by_size")).ok


def test_the_head_is_read_from_tflite_micros_own_report(bench):
    data = model_bytes("hello_world_int8")
    found = bench.allocations(tflm, data, 100_000)
    assert found["head"] == 32 and found["tail"] > 0 and found["output"].shape == (1, 1)  # the README's head


def test_times_side_by_side_say_the_route_and_what_each_covers(bench):
    data = model_bytes("hello_world_int8")
    times = bench.side_by_side(tflm, data, runtime.load_model(data), 100_000, repeat=3, budget=0.0)
    assert times["route"] == "program" and times["rounds"] == 3
    for key in ("tflm_seconds", "tflm_call_seconds", "invoke_seconds", "run_seconds", "loop_seconds"):
        assert 0 < times[key] < 1, key
    table = "\n".join(bench.time_table([times | {"model": "hello_world_int8", "tiled_seconds": 1e-5}]))
    assert "| hello_world_int8 | program | 3 |" in table and "`invoke()`" in table and "invoker()" in table


def test_the_whole_calls_breakdown_covers_both_sides(bench):
    data = model_bytes("hello_world_int8")
    parts = bench.breakdown(tflm, data, runtime.load_model(data), 100_000, budget=0.0)
    assert set(parts) == {"set_input", "invoke", "get_output", "run", "fed", "copy"}
    assert all(0 < v < 1e-3 for v in parts.values()), parts
    times = {k: 1e-6 for k in ("tflm_seconds", "tflm_call_seconds", "invoke_seconds", "run_seconds", "loop_seconds")}
    row = times | {"model": "hello_world_int8", "tiled_seconds": 1e-5, "route": "program", "rounds": 1, "parts": parts}
    table = "\n".join(bench.time_table([row]))
    assert "| TFLM `set_input` |" in table and table.count("| hello_world_int8 |") == 2
