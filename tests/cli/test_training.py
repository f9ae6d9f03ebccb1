"""`memplan train-plan` and `memplan train` take the memory switches of a training step,
--alignment, --workspace and --prepared-weights, as `plan` and `run` do (app/cli/common.py).

Oracles: the capacities `runtime.training.plan_categories` gives for the same step and options,
called directly; the demo's first loss, which the options must not change (memory, not maths)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from app.cli import app
from runtime import MemoryOptions
from runtime.training import build_training_step, plan_categories, training_problem
from tests.memory_models import winograd_convs
from tests.runtime.paddle_models import save

runner = CliRunner()


@pytest.fixture(scope="module")
def convs(tmp_path_factory):
    """A model whose 3x3 convolutions Winograd takes (prepared weights), and its ONNX."""
    model, _ = winograd_convs(channels=32, size=16)
    return save(model, tmp_path_factory.mktemp("convs"), "convs"), model


@pytest.mark.parametrize(
    ("flags", "options"),
    [
        ([], {}),
        (["--prepared-weights", "off"], {"prepared_weights": False}),
        (["--workspace", "off"], {"workspace": False}),
        (["--alignment", "256"], {"alignment": 256}),
    ],
)
def test_train_plan_takes_the_memory_options_of_a_training_step(convs, flags, options):
    path, proto = convs
    result = runner.invoke(app, ["train-plan", str(path), "--loss", "mse", "--json", *flags])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    step = build_training_step(proto, loss="mse", optimizer="sgd")
    direct = plan_categories(training_problem(step, MemoryOptions(**options)), "greedy_by_size")
    assert report["capacities"] == direct.capacities and report["unified"] == direct.unified.arena_bytes
    defaults = MemoryOptions()
    assert report["options"] == {
        "alignment": options.get("alignment", defaults.alignment),
        "workspace": options.get("workspace", defaults.workspace),
        "prepared_weights": options.get("prepared_weights", defaults.prepared_weights),
    }
    # Kernel scratch is the "disposable" category: none in the arena with --workspace off.
    assert (report["capacities"]["disposable"] == 0) == (options.get("workspace") is False)


def test_train_plan_prints_its_memory_options_under_the_capacities(convs):
    path, _ = convs
    args = ["train-plan", str(path), "--loss", "mse", "--alignment", "128", "--workspace", "off"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "[ALLOC] allocation capacity: 0 # disposable" in result.stdout
    assert result.stdout.splitlines()[-1] == (
        "# memory options: alignment 128 bytes, workspace off, prepared weights on"
    )


def _demo(*flags: str) -> dict[str, str]:
    result = runner.invoke(app, ["train", "--model", "cnn", "--steps", "2", "--batch", "8", *flags])
    assert result.exit_code == 0, result.output
    memory = re.search(r"^memory options: (.*)$", result.stdout, flags=re.MULTILINE)
    loss = re.search(r"^loss: (\S+) ->", result.stdout, flags=re.MULTILINE)
    assert memory and loss, result.stdout
    return {"memory": memory[1], "first_loss": loss[1]}


def test_train_runs_the_demo_with_the_memory_options_it_was_given():
    default = _demo()
    given = _demo("--alignment", "256", "--workspace", "off", "--prepared-weights", "off")
    assert default["memory"].startswith("alignment 64 bytes, workspace on, prepared weights on; kernel scratch ")
    assert not default["memory"].endswith("kernel scratch 0 bytes")  # the CNN's convolutions take scratch
    assert given["memory"] == "alignment 256 bytes, workspace off, prepared weights off; kernel scratch 0 bytes"
    assert given["first_loss"] == default["first_loss"]  # the options change the memory, not the maths


@pytest.mark.parametrize("command", ["train-plan", "train"])
@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--workspace", "maybe", "--workspace takes on|off, got 'maybe'"),
        ("--prepared-weights", "yes", "--prepared-weights takes on|off, got 'yes'"),
        ("--alignment", "0", "--alignment must be a positive number of bytes, got 0"),
    ],
)
def test_bad_memory_switches_are_refused_naming_the_flag(convs, command, flag, value, message):
    args = [command, str(convs[0])] if command == "train-plan" else [command]
    result = runner.invoke(app, [*args, flag, value])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"memplan: error: {message}"


@pytest.mark.parametrize("flag", ["--io", "--inplace", "--concat-inplace", "--fuse"])
def test_switches_a_training_step_does_not_take_are_not_options(convs, flag):
    for args in (["train-plan", str(convs[0])], ["train"]):
        result = runner.invoke(app, [*args, flag, "off"])
        assert result.exit_code == 2 and f"No such option: {flag}" in result.stderr, result.output
