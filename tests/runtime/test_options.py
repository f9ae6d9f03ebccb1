"""MemoryOptions: one frozen value, defaults defined once, JSON round-trip, clear refusals."""

from __future__ import annotations

import dataclasses

import pytest

import runtime
from runtime import DEFAULT_ALIGNMENT, MemoryOptions, ModelError
from tests.memory_models import mlp


def test_defaults_and_replace():
    options = MemoryOptions()
    assert (options.io, options.workspace, options.alignment) == ("arena", True, 64) and DEFAULT_ALIGNMENT == 64
    assert options.inplace and options.concat_inplace and options.fuse and options.prepared_weights
    changed = options.replace(io="external", workspace=False)
    assert (changed.io, changed.workspace, options.io) == ("external", False, "arena")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.io = "external"  # type: ignore[misc]


def test_json_round_trip():
    options = MemoryOptions(io="external", alignment=128, concat_inplace=False)
    assert MemoryOptions.from_json(options.to_json()) == options
    assert MemoryOptions.from_json({}) == MemoryOptions()
    off = MemoryOptions(prepared_weights=False)
    assert off.to_json()["prepared_weights"] is False
    assert MemoryOptions.from_json(off.to_json()) == off != MemoryOptions()
    # options stored before the switch existed read as today's behaviour: on
    before = {k: v for k, v in MemoryOptions().to_json().items() if k != "prepared_weights"}
    assert MemoryOptions.from_json(before).prepared_weights is True


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: MemoryOptions(io="disk"), "io='disk': accepted values are ('arena', 'external')"),
        (lambda: MemoryOptions(alignment=0), "alignment=0: must be a positive number of bytes"),
        (lambda: MemoryOptions.from_json({"io": "arena", "align": 8}), "unknown key(s) ['align']; accepted keys are"),
        (
            lambda: MemoryOptions(prepared_weights="off"),  # type: ignore[arg-type]
            "prepared_weights='off': a switch, accepted values are True and False",
        ),
        (
            lambda: MemoryOptions.from_json({"prepared_weights": 0}),
            "prepared_weights=0: a switch, accepted values are True and False",
        ),
        (
            lambda: MemoryOptions.from_json({"prepared": False}),
            "unknown key(s) ['prepared']; accepted keys are ['io', 'workspace', 'alignment', 'inplace', "
            "'concat_inplace', 'fuse', 'prepared_weights']",
        ),
        (lambda: MemoryOptions(fuse=None), "fuse=None: a switch"),  # type: ignore[arg-type]
    ],
)
def test_refusals_name_the_field(make, message):
    with pytest.raises(ModelError) as error:
        make()
    assert message in str(error.value)
    assert isinstance(error.value, ValueError)


def test_memory_problem_takes_the_options():
    graph = runtime.load_model(mlp(), dims={"N": 2})
    inside = {b.id for b in runtime.memory_problem(graph).buffers}
    outside = {b.id for b in runtime.memory_problem(graph, MemoryOptions(io="external")).buffers}
    assert set(graph.inputs) <= inside and not set(graph.inputs) & outside
    assert runtime.memory_problem(graph, MemoryOptions(alignment=256)).alignment == 256
