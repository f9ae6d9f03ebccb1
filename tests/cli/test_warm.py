"""`memplan warm`, as the image's build runs it: numba's cache filled in a fresh NUMBA_CACHE_DIR, and a
later process that plans and runs the same way loads every loop it uses from there, compiling none.

Oracle: numba's own dispatcher stats (cache hits and misses per signature), read in a second process
that plans and trains without `warm`, and the cache's index files on disk. No timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.cli.warm import FLAGS
from app.services.warm import WarmError, loop_stats, warm
from planner import jit
from planner.timeline_jit import FROM_BLOCKS

ROOT = Path(__file__).resolve().parents[2]

# A process that never ran `warm`: plans a generated problem big enough for the compiled placing
# loop, trains one step of the demo MLP, and prints what numba compiled and loaded.
LATER = f"""
import json
from planner import check_plan, jit, plan
from planner.generate import network_like
from runtime.training.demo import train_demo

problem = network_like({FROM_BLOCKS})
assert check_plan(problem, plan(problem, "greedy_by_size")).ok
train_demo("mlp", steps=1)
[placing] = [loop for loop in jit.LOOPS if loop.__qualname__ == "place_run"]
used = [loop for loop in jit.LOOPS if loop.signatures]
print(json.dumps({{
    "placing_loop_loaded": sum(placing.stats.cache_hits.values()),
    "placing_loop_compiled": sum(placing.stats.cache_misses.values()),
    "kernel_loops_loaded": sum(sum(loop.stats.cache_hits.values()) for loop in used if "kernels" in loop.__module__),
    "compiled": {{loop.__qualname__: sum(loop.stats.cache_misses.values()) for loop in used}},
}}))
"""


def _python(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(not jit.ENABLED, reason="compiled loops are off (numba not installed, or MEMPLAN_JIT=0)")
def test_warm_fills_the_cache_and_a_later_process_compiles_nothing(tmp_path):
    cache = tmp_path / "numba"
    args = ["-m", "app.cli", "warm", "--blocks", str(FROM_BLOCKS), "-s", "greedy_by_size", "--model", "mlp", "--json"]
    done = _python(args, cache)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["compiled_loops"] is True
    assert [step["what"] for step in report["steps"]] == [
        f"plan network_like({FROM_BLOCKS:,}) with greedy_by_size",
        f"plan training_like({FROM_BLOCKS:,}) with greedy_by_size",
        "run mlp",
        "run recurrence_routes (tiny graph)",
        "run normalisations (tiny graph)",
        "run convolutions (tiny graph)",
        "run conv_routes (tiny graph)",
        "run pool_routes (tiny graph)",
        "run quantized (tiny graph)",
        "run qlinear_matmul_routes (tiny graph)",
        "run tflite_int8 (tiny graph)",
        "run tflite_lstm_int8 (tiny graph)",
        "run tflite_lstm_int16 (tiny graph)",
        "run tflite_lstm_float32 (tiny graph)",
        "run tflite_svdf_int8 (tiny graph)",
        "run tiled_stage (tiny graph, --tile auto)",
    ]
    assert report["compiled"] > 0 and report["loaded"] == 0  # a fresh cache: everything compiled here
    # Every loop Python calls (a kernel's or the planner's) ran, so a new one warm misses fails here.
    assert report["missed"] == [], report["missed"]
    assert report["cache"] and all(Path(path).is_relative_to(cache) for path in report["cache"])
    index = {path.name.split("-")[0] for path in cache.rglob("*.nbi")}
    assert "timeline_jit.place_run" in index and any(
        path.parent.name.startswith("kernels_") for path in cache.rglob("*.nbi")
    )
    assert list(cache.rglob("*.nbc"))  # the compiled code beside its index

    later = _python(["-c", LATER], cache)
    assert later.returncode == 0, later.stderr
    stats = json.loads(later.stdout)
    assert stats["placing_loop_loaded"] >= 1 and stats["placing_loop_compiled"] == 0
    assert stats["kernel_loops_loaded"] >= 1
    assert not any(stats["compiled"].values()), stats["compiled"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--blocks", "100"], f"--blocks 100: at least {FROM_BLOCKS:,}"),
        (["--strategy", "fastest"], "--strategy fastest: no such strategy; accepted: naive"),
        (["--model", "gpt"], "--model gpt: no such model; accepted: mlp, cnn, bvlc_alexnet"),
    ],
)
def test_warm_refuses_what_it_cannot_warm_before_any_work(args, words):
    result = CliRunner().invoke(app, ["warm", *args])
    assert result.exit_code == 2 and words in result.output, result.output


def test_the_service_names_its_parameter_and_the_cli_its_flag():
    with pytest.raises(WarmError) as refused:
        warm(blocks=FROM_BLOCKS - 1, strategies=[], models=[])
    assert refused.value.parameter == "blocks" and "--" not in str(refused.value)
    assert set(FLAGS) == {"blocks", "strategies", "models"}  # every parameter the service may name


@pytest.mark.skipif(not jit.ENABLED, reason="compiled loops are off (numba not installed, or MEMPLAN_JIT=0)")
def test_entries_are_the_loops_no_other_loop_calls_or_inlines():
    loop_stats()  # imports every kernel module
    entries = {f"{loop.py_func.__module__}.{loop.__qualname__}" for loop in jit.entries()}
    assert {
        "planner.timeline_jit.place_run",
        "runtime.kernels.jit_rnn._lstm_py",
        "runtime.kernels.jit_bands._run",
        "runtime.kernels.squeeze_excite._squeeze_excite",
    } <= entries
    # called from compiled loops (timeline_jit's helpers, jit_rnn's cell; the depthwise loop from a tiled
    # stage's interpreter as well as from Python), or inlined (Gemm's epilogue)
    assert (
        not {
            "runtime.kernels.conv.jit_depthwise._depthwise",
            "planner.timeline_jit._reserve",
            "planner.gapsearch.gap_search",
            "runtime.kernels.jit_rnn._lstm_cell_py",
            "runtime.kernels.matmul._finish",
        }
        & entries
    )
