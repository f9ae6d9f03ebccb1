"""memplan's plan handed back to TensorFlow Lite Micro, run in its real interpreter (the `tflite-micro` wheel).

The oracle is TensorFlow Lite Micro itself: the exported model must allocate and invoke with outputs
identical to those of the same model under its own planner, and the arena head it reports
(`print_allocations`) shows whether it placed the tensors where memplan did.
"""

from __future__ import annotations

import dataclasses
import re
import struct

import numpy as np
import pytest

import runtime
from planner import Placement, plan
from runtime.tflite.export import METADATA_NAME, export_plan
from runtime.tflite.flat import root
from tests.runtime.tflite.shared import NAMES, model_bytes

tflm = pytest.importorskip(
    "tflite_micro.python.tflite_micro.runtime", reason="tflite-micro (the test extra) is not installed"
)
ARENA = 4_000_000
FOR_TFLM = runtime.MemoryOptions(inplace=False, concat_inplace=False, workspace=False, alignment=16)


def run_tflm(data: bytes, capfd) -> tuple[list[np.ndarray], int]:
    """Outputs for a seeded input, and the arena head TensorFlow Lite Micro reports."""
    interpreter = tflm.Interpreter.from_bytes(data, arena_size=ARENA)
    detail = interpreter.get_input_details(0)
    rng = np.random.default_rng(7)
    info = np.iinfo(detail["dtype"])
    interpreter.set_input(
        rng.integers(info.min, info.max, size=detail["shape"], endpoint=True).astype(detail["dtype"]), 0
    )
    interpreter.invoke()
    outputs = [interpreter.get_output(0).copy()]  # every shared model has one output
    capfd.readouterr()
    interpreter.print_allocations()
    printed = capfd.readouterr()
    head = re.search(r"Arena allocation head (\d+) bytes", printed.err + printed.out)
    assert head, "print_allocations() printed no head"
    return outputs, int(head.group(1))


def offline_offsets(data: bytes) -> list[int]:
    model = root(data)
    buffers = model.tables(4, "buffers")
    found = [m for m in model.tables(6, "metadata") if m.string(0, "name") == METADATA_NAME]
    assert len(found) == 1
    values = buffers[int(found[0].scalar(1, "I", 0, "buffer"))].array(0, "u1", "data")
    header = struct.unpack_from("<3i", values.tobytes())
    return list(struct.unpack_from(f"<{header[2]}i", values.tobytes(), 12))


@pytest.mark.parametrize("name", NAMES)
def test_the_exported_plan_runs_in_tflite_micro_with_identical_outputs(name, capfd):
    data = model_bytes(name)
    graph = runtime.load_model(data)
    made = plan(runtime.memory_problem(graph, FOR_TFLM), "greedy_by_size")
    exported = export_plan(data, graph, made)
    own_outputs, own_head = run_tflm(data, capfd)
    our_outputs, our_head = run_tflm(exported.data, capfd)
    for own, ours in zip(own_outputs, our_outputs, strict=True):
        assert np.array_equal(own, ours)
    assert exported.online == {}
    assert exported.head == made.pool_sizes["arena"]
    assert our_head >= exported.head  # its kernels' scratch, placed by its own planner, may add to it
    if name in ("hello_world_int8", "person_detect", "mobilenet_v2_quantized_1x3x224x224"):
        assert our_head == exported.head == own_head  # no scratch: exactly memplan's arena, at the floor
    offsets = offline_offsets(exported.data)
    placed = {t: p.offset for t, p in made.offsets.items()}
    assert sorted(o for o in offsets if o >= 0) == sorted(placed[t] for t in exported.offsets)


def test_tflite_micro_places_the_tensors_where_the_plan_says(capfd):
    """A plan that shares nothing makes TensorFlow Lite Micro's head the sum of the tensors it lays end to end."""
    data = model_bytes("hello_world_int8")
    graph = runtime.load_model(data)
    made = plan(runtime.memory_problem(graph, FOR_TFLM), "greedy_by_size")
    apart, top = {}, 0
    for name in made.offsets:
        apart[name] = Placement("arena", top)
        top += -(-graph.tensors[name].nbytes // 16) * 16
    exported = export_plan(data, graph, dataclasses.replace(made, offsets=apart))
    _, head = run_tflm(exported.data, capfd)
    assert head == top > made.pool_sizes["arena"]


def test_an_overlap_tflite_micro_kernels_cannot_take_is_left_to_its_own_planner(capfd):
    data = model_bytes("hello_world_int8")
    graph = runtime.load_model(data)
    made = plan(runtime.memory_problem(graph, FOR_TFLM), "greedy_by_size")
    first = graph.nodes[0]
    over = dict(made.offsets)
    over[first.outputs[0]] = Placement("arena", made.offsets[first.inputs[0]].offset)  # FULLY_CONNECTED in place
    exported = export_plan(data, graph, dataclasses.replace(made, offsets=over))
    assert list(exported.online) == [first.outputs[0]]
    assert "FULLY_CONNECTED" not in exported.online[first.outputs[0]] and "RESHAPE" in exported.online[first.outputs[0]]
    own, _ = run_tflm(data, capfd)
    ours, _ = run_tflm(exported.data, capfd)
    assert np.array_equal(own[0], ours[0])


def test_exporting_twice_keeps_one_offline_plan():
    data = model_bytes("micro_speech_quantized")
    graph = runtime.load_model(data)
    made = plan(runtime.memory_problem(graph, FOR_TFLM), "greedy_by_size")
    once = export_plan(data, graph, made)
    twice = export_plan(once.data, runtime.load_model(once.data), made)
    assert offline_offsets(twice.data) == offline_offsets(once.data)
    assert [n.op_type for n in runtime.load_model(twice.data).nodes] == [n.op_type for n in graph.nodes]


def test_a_plan_of_another_model_is_refused():
    data = model_bytes("hello_world_int8")
    other = runtime.load_model(model_bytes("micro_speech_quantized"))
    made = plan(runtime.memory_problem(other, FOR_TFLM), "greedy_by_size")
    with pytest.raises(runtime.ModelError, match="not this .tflite model"):
        export_plan(data, other, made)
