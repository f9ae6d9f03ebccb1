"""bench/peer_table.py: the peers table with its TFLite column, the best of the three peers and
its geometric mean, and the previous run's figures kept where a peer cannot be imported.
Pure functions on hand-made rows: no peer is installed or run."""

from __future__ import annotations

import math

import pytest


@pytest.fixture(scope="module")
def table(bench_module):
    return bench_module("peer_table")


def memplan(like: int) -> dict:
    return {
        "like": like,
        "inclusive": 2 * like,
        "like_load": like,
        "like_winner": "greedy_by_size",
        "like_rigid": like,
        "like_rigid_load": like,
        "like_no_concat": like,
        "reordered": like,
        "verified": True,
    }


def row(table, name: str, like: int, ort: dict, tvm: dict, tflite: dict) -> dict:
    r = {"model": name, "memplan": memplan(like), "ort": ort, "tvm": tvm, "tflite": tflite}
    r["best_peer"] = table.best_peer(r)
    return r


def rows(table) -> list[dict]:
    """a: TFLite is the best peer; b: TFLite failed, TVM from the previous run; c: only TFLite."""
    optimized = {"bytes": 900, "arena": 1000}
    return [
        row(table, "a", 400, {"planned": 1000}, {"bytes": 800}, {"bytes": 500, "optimized": optimized}),
        row(table, "b", 300, {"planned": 600}, {"bytes": 450, "previous": True}, {"error": "RuntimeError: no Gather"}),
        row(table, "c", 200, {"error": "x"}, {"error": "y"}, {"bytes": 100, "optimized": {"bytes": 100}}),
    ]


def test_the_best_peer_is_the_smallest_figure_of_the_three(table):
    a, b, c = rows(table)
    assert (a["best_peer"], b["best_peer"], c["best_peer"]) == (500, 450, 100)
    assert table.best_peer({"ort": {"error": "x"}, "tvm": {"error": "y"}, "tflite": {"error": "z"}}) is None


def test_the_table_has_a_tflite_column_and_the_mean_over_the_best_peers(table):
    text = table.markdown(rows(table), run=True)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| model |"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells[2:6] == ["onnxruntime", "TVM", "TFLite", "best peer"]
    a = next(line for line in lines if line.startswith("| a |")).strip("|").split("|")
    assert [c.strip() for c in a[1:7]] == ["400", "1,000", "800", "500", "500", "0.800"]
    b = next(line for line in lines if line.startswith("| b |")).strip("|").split("|")
    assert b[3].strip() == "450*" and b[4].strip() == "n/a: RuntimeError: no Gather"
    mean = next(line for line in lines if line.startswith("| geometric mean (3 models)"))
    expected = math.exp((math.log(400 / 500) + math.log(300 / 450) + math.log(200 / 100)) / 3)
    assert f"| {expected:.3f} |" in mean
    # Every row has as many cells as the header.
    assert {line.count("|") for line in lines if line.startswith("| ")} == {header.count("|")}


def test_the_notes_name_tflite_failures_stale_figures_and_its_optimized_kernels(table):
    text = table.markdown(rows(table), run=True)
    assert "- TFLite could not take b: RuntimeError: no Gather" in text
    assert "- TVM could not be imported in this run: its figures marked * (b)" in text
    assert "activations span grows on a (900)" in text and "c (100)" not in text
    assert "memplan above the best peer on: c; equal on: none." in text
    assert "It is under memplan's LOAD on: c (100 against LOAD 200)" in text


def test_the_hand_worked_check_is_reported_passed_or_failed(table):
    passed = {"bytes": 8192, "arena": 12288, "passed": True}
    assert "activations 8,192, whole arena 12,288, as expected." in table.markdown(rows(table), True, passed)
    failed = table.markdown(rows(table), True, passed | {"bytes": 4096, "passed": False})
    assert "FAILED" in failed and "as expected" not in failed
    assert "hand" not in table.markdown(rows(table), True, None)


def test_a_hand_worked_check_that_errors_out_says_why_it_could_not_run(table):
    error = {"error": "RuntimeError: chain.onnx, reference kernels: tensor 3 (intermediate) starts at byte 0"}
    text = table.markdown(rows(table), True, error)
    assert "worked out by hand" in text
    assert "could not run: RuntimeError: chain.onnx, reference kernels: tensor 3 (intermediate)" in text
    assert table.chain_note(error) in text
    # TFLite not installed: no line of its own, the stale figures' note says it.
    for missing in ("ModuleNotFoundError: No module named 'onnx2tf'", "ModuleNotFoundError: No module named 'psutil'"):
        assert table.chain_note({"error": missing}) is None
        assert "hand" not in table.markdown(rows(table), True, {"error": missing})


def test_errors_carried_over_from_the_previous_run_are_worded_as_its(table):
    a, b, c = rows(table)
    stale = row(
        table, "d", 300, {"planned": 600}, {"bytes": 450}, {"error": "RuntimeError: no Gather", "previous": True}
    )
    text = table.markdown([a, b, c, stale], run=True)
    assert "- TFLite could not take b: RuntimeError: no Gather" in text
    assert "- TFLite could not take d in the previous run: RuntimeError: no Gather" in text
    assert "- TFLite could not take d:" not in text
    assert "- TFLite could not be imported in this run: its figures marked * (d)" in text


def test_a_peer_that_cannot_be_imported_keeps_its_previous_figure(table):
    before = {"tvm": 450, "tflite": 500}
    missing = {"error": "ModuleNotFoundError: No module named 'onnx2tf'"}
    assert table.keep_previous("tflite", missing, before) == {"bytes": 500, "previous": True}
    tensorflow = {"error": "ModuleNotFoundError: No module named 'tensorflow'"}
    assert table.keep_previous("tflite", tensorflow, before) == {"bytes": 500, "previous": True}
    assert table.keep_previous("tvm", {"error": "No module named 'tvm'"}, before) == {"bytes": 450, "previous": True}
    # A failure on the model is the model's cell, and with no previous figure the error stays.
    failed = {"error": "RuntimeError: no Gather"}
    assert table.keep_previous("tflite", failed, before) == failed
    assert table.keep_previous("tflite", missing, {"tvm": 450}) == missing
    # A dependency of the converter missing is the converter not importable, whichever it is.
    for module in ("sng4onnx", "psutil", "onnx_graphsurgeon"):
        dependency = {"error": f"ModuleNotFoundError: No module named '{module}'"}
        assert table.keep_previous("tflite", dependency, before) == {"bytes": 500, "previous": True}
    # An ImportError of another kind (a module found but broken) is an error, not a missing peer.
    broken = {"error": "ImportError: cannot import name 'convert' from 'onnx2tf'"}
    assert table.keep_previous("tflite", broken, before) == broken
    # The previous run's reason, where it had no figure, is kept as well, marked.
    kept = table.keep_previous("tvm", {"error": "No module named 'tvm'"}, {"tvm": "OpNotImplemented: LSTM"})
    assert kept == {"error": "OpNotImplemented: LSTM", "previous": True}
    assert table.cell(kept, "bytes") == "n/a: OpNotImplemented: LSTM*"


def test_the_previous_figures_are_read_back_by_column_header(table, tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(
        "# x\n\n" + table.markdown(rows(table), run=True) + "\n## Next section\n| model | TVM |\n| z | 9 |\n"
    )
    assert table.previous_figures(doc) == {
        "a": {"like": 400, "tvm": 800, "tflite": 500},
        "b": {"like": 300, "tvm": 450, "tflite": "RuntimeError: no Gather"},
        "c": {"like": 200, "tvm": "y", "tflite": 100},
    }


def test_a_table_without_the_tflite_column_is_read_too(table, tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(
        "## Peers: memplan's arena against onnxruntime and TVM\n\n"
        "| model | memplan like for like | onnxruntime | TVM | best peer |\n|---|---:|---:|---:|---:|\n"
        "| a | 1,119,744 | 2,239,488 | 3,428,864* | 2,239,488 |\n| b | 7 | 8 | n/a: LSTM | 8 |\n"
    )
    assert table.previous_figures(doc) == {"a": {"like": 1119744, "tvm": 3428864}, "b": {"like": 7, "tvm": "LSTM"}}
    assert table.previous_figures(tmp_path / "missing.md") == {}
