"""`memplan plan --tile auto|off --tile-overhead F --tile-slack F`: the tiling field, the smallest arena
unless a slack trades some of it for fewer bands, and bad input refused by name."""

from __future__ import annotations

import json

import onnx
import pytest
from typer.testing import CliRunner

from app.cli import app
from runtime import MemoryOptions
from runtime.training.models import mlp, mobilenet_v2_like

EXTERNAL = MemoryOptions(io="external")

runner = CliRunner()


@pytest.fixture(scope="module")
def cnn(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tile") / "cnn.onnx"
    onnx.save(mobilenet_v2_like(size=64, width=0.35, classes=10), path)
    return str(path)


@pytest.fixture(scope="module")
def dense(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tile") / "mlp.onnx"
    onnx.save(mlp(), path)
    return str(path)


def _rows(args: list[str]) -> list[dict]:
    result = runner.invoke(app, ["plan", *args, "--json", "-s", "greedy_by_size,first_fit"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_json_carries_the_tiling_in_every_row_and_a_smaller_arena(cnn):
    untiled = _rows([cnn, "--io", "external"])
    tiled = _rows([cnn, "--io", "external", "--tile", "auto"])
    assert all(row["tiling"] is None for row in untiled)
    for row, before in zip(tiled, untiled, strict=True):
        field = row["tiling"]
        assert set(field) == {"stages", "extra_macs", "arena_bytes_untiled", "curve"}
        assert field["stages"][0]["method"] in ("stripes", "patches") and field["stages"][0]["tiles"] > 1
        assert 0 <= field["extra_macs"] <= 0.2
        assert row["arena_bytes"] < before["arena_bytes"]
    assert tiled[0]["tiling"]["arena_bytes_untiled"] == untiled[0]["arena_bytes"]


def test_tile_slack_reaches_the_search_and_trades_arena_for_fewer_bands(cnn):
    """The trade itself is tested on the library (test_tiling.py); here the flag reaches it."""
    rows = {
        slack: _rows([cnn, "--io", "external", "--tile", "auto", "--tile-slack", slack])[0] for slack in ("0", "0.5")
    }
    # On this model the smallest arena takes more bands than one within 50% of it.
    assert rows["0.5"]["tiling"]["stages"][0]["tiles"] < rows["0"]["tiling"]["stages"][0]["tiles"]


def test_a_model_with_nothing_tileable_plans_untiled_and_says_so(dense):
    result = runner.invoke(app, ["plan", dense, "--tile", "auto", "-s", "greedy_by_size"])
    assert result.exit_code == 0, result.output
    assert "nothing tileable" in result.output and "planned untiled" in result.output
    assert all(row["tiling"] is None for row in _rows([dense, "--tile", "auto"]))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--tile", "yes"], "--tile 'yes': accepted values are auto, off"),
        (["--tile", "auto", "--tile-overhead", "-0.5"], "--tile-overhead -0.5: takes a number >= 0"),
        (["--tile", "auto", "--tile-overhead", "nan"], "--tile-overhead nan: takes a number >= 0"),
        (["--tile", "auto", "--tile-overhead", "lots"], "--tile-overhead"),
        (["--tile", "auto", "--tile-slack", "-0.1"], "--tile-slack -0.1: takes a number >= 0"),
        (["--tile", "auto", "--tile-slack", "inf"], "--tile-slack inf: takes a number >= 0"),
    ],
)
def test_bad_tile_flags_exit_2_naming_the_flag(dense, args, named):
    result = runner.invoke(app, ["plan", dense, *args])
    assert result.exit_code == 2
    assert named in result.output
    assert "Traceback" not in result.output


def test_a_sweep_with_tile_auto_plans_the_tiled_graph_and_says_so(cnn):
    from app.services.sweeps import groups_of, plan_group, tasks_of

    def rows(tile: str) -> list[dict]:
        tasks = tasks_of({"cnn": cnn}, ["greedy_by_size"], [{}], memory=EXTERNAL, tile=tile)
        return [row for group in groups_of(tasks) for row in plan_group(group)]

    (plain,), (tiled,) = rows("off"), rows("auto")
    assert "tiling" not in plain and plain["error"] is None
    assert tiled["tiling"]["arena_bytes_untiled"] == plain["arena_bytes"]
    assert tiled["arena_bytes"] < plain["arena_bytes"] and tiled["valid"]


@pytest.mark.parametrize("args", [["--tile", "both"], ["--tile", "auto", "--tile-overhead", "-1"]])
def test_sweep_refuses_bad_tile_flags_before_any_work(dense, args):
    result = runner.invoke(app, ["sweep", dense, *args])
    assert result.exit_code == 2 and "--tile" in result.output
