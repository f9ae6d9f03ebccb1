"""`memplan plan|run FILE.tflite` and `--output FILE.tflite` through the real command line: the
exported model read back by memplan's reader, and bad input as exit 2 with one line naming it."""

from __future__ import annotations

import struct

import tflite
from typer.testing import CliRunner

import planner
import runtime
from app.cli import app
from app.services.library import EXAMPLES_DIR
from runtime.tflite.flat import root
from tests.runtime.tflite.shared import model_bytes, model_path

runner = CliRunner()
FOR_TFLM = ["--inplace", "off", "--workspace", "off", "--alignment", "16"]


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def with_every_operator_as(data: bytes, builtin: int) -> bytes:
    """The model with each operator code turned into `builtin` (sizes still come from the file)."""
    out = bytearray(data)
    for code in root(data).tables(1, "operator_codes"):
        for field, fmt in ((0, "b"), (3, "i")):
            if (at := code.slot(field)) is not None:
                struct.pack_into("<" + fmt, out, at, builtin)
    return bytes(out)


def test_plan_writes_the_offline_plan_into_a_copy_of_the_model(tmp_path):
    source = model_path("person_detect")
    out = tmp_path / "planned.tflite"
    result = invoke("plan", source, "-s", "greedy_by_size", *FOR_TFLM, "--output", out)
    assert result.exit_code == 0, result.output
    graph = runtime.load_model(source)
    placed = len(graph.tensors) - len(graph.constants)  # every activation, input and output
    assert f"{placed} tensors planned offline, head 55,296 bytes" in result.output  # TFLM's own head, README
    planned = runtime.load_model(out)
    assert [n.op_type for n in planned.nodes] == [n.op_type for n in graph.nodes]
    names = [m.string(0, "name") for m in root(out.read_bytes()).tables(6, "metadata")]
    assert "OfflineMemoryAllocation" in names


def test_output_tflite_needs_a_tflite_model_and_the_files_order(tmp_path):
    onnx_model = EXAMPLES_DIR / "light_squeezenet.onnx"
    result = invoke("plan", onnx_model, "-s", "greedy_by_size", "--output", tmp_path / "x.tflite")
    assert result.exit_code == 2 and "is not a .tflite model" in result.output
    result = invoke("plan", model_path("micro_speech_quantized"), "--reorder", "--output", tmp_path / "x.tflite")
    assert result.exit_code == 2 and "file's operator order" in result.output
    assert not (tmp_path / "x.tflite").exists()


def test_an_operator_without_a_kernel_plans_and_run_names_it(tmp_path):
    model = tmp_path / "sines.tflite"
    model.write_bytes(with_every_operator_as(model_bytes("hello_world_int8"), tflite.BuiltinOperator.SIN))
    planned = invoke("plan", model, "-s", "greedy_by_size", "--alignment", "16", "--json")
    assert planned.exit_code == 0, planned.output
    result = invoke("run", model)
    assert result.exit_code == 2
    assert "no kernel" in result.output and "SIN" in result.output and "SIN_0" in result.output


def test_a_damaged_tflite_is_exit_2_naming_the_field(tmp_path):
    model = tmp_path / "cut.tflite"
    model.write_bytes(model_bytes("micro_speech_quantized")[:9000])
    result = invoke("plan", model, "-s", "greedy_by_size")
    assert result.exit_code == 2
    assert result.output.startswith("memplan: error: model.") or "model." in result.output
    assert "Traceback" not in result.output


def test_sweep_takes_a_folder_of_tflite_models(tmp_path):
    import json

    (tmp_path / "hello.tflite").write_bytes(model_bytes("hello_world_int8"))
    (tmp_path / "speech.tflite").write_bytes(model_bytes("micro_speech_quantized"))
    result = invoke("sweep", tmp_path, "-s", "greedy_by_size", "--workers", "1", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["model"]: r for r in json.loads(result.output[result.output.index("[") :])}
    assert set(rows) == {"hello", "speech"}
    for name, row in rows.items():
        graph = runtime.load_model(tmp_path / f"{name}.tflite")
        made = planner.plan(runtime.memory_problem(graph), "greedy_by_size")  # the same problem, the same strategy
        assert (row["arena_bytes"], row["lower_bound"], row["valid"]) == (made.arena_bytes, made.lower_bound, True)
