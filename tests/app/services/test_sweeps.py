"""The sweep service's pieces, on real model files: a grid is the product of its values
(itertools, here), and each row's figures are those the runtime and planner give the file
directly, with LOAD reckoned here step by step."""

from __future__ import annotations

import csv
import io
import itertools

import pytest

import planner
import runtime
from app.services import sweeps
from app.services.inputs import InputError
from tests.memory_models import mlp, save


def test_a_grid_is_every_combination_of_its_values():
    grid = sweeps.parse_dims_grid("seq=64,128,batch=1,8,32")
    expected = [{"batch": b, "seq": s} for b, s in itertools.product((1, 8, 32), (64, 128))]
    assert sorted(grid, key=lambda d: (d["batch"], d["seq"])) == expected
    assert sweeps.parse_dims_grid(None) == [{}]


@pytest.mark.parametrize(
    ("text", "words"), [("8,16", "has no name"), ("batch=x", "not a whole number"), ("n=0", "positive")]
)
def test_a_bad_grid_says_what_is_accepted(text, words):
    with pytest.raises(InputError, match=words):
        sweeps.parse_dims_grid(text)


def test_each_row_is_what_the_runtime_and_planner_give_the_file(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    memory = runtime.MemoryOptions(inplace=False, concat_inplace=False)  # no aliases: LOAD is a plain sum
    tasks = sweeps.tasks_of({"mlp": str(path)}, ["greedy_by_size", "first_fit"], [{"N": 2}, {"N": 16}], memory=memory)
    assert [(t.strategy, dict(t.dims)) for t in tasks] == [
        ("greedy_by_size", {"N": 2}),
        ("first_fit", {"N": 2}),
        ("greedy_by_size", {"N": 16}),
        ("first_fit", {"N": 16}),
    ]
    rows = [sweeps.plan_task(task) for task in tasks]
    for task, row in zip(tasks, rows, strict=True):
        problem = runtime.memory_problem(runtime.load_model(path, dims=dict(task.dims)), memory)
        live = max(sum(b.size for b in problem.buffers if b.first <= s <= b.last) for s in range(problem.steps))
        assert row["valid"] and row["arena_bytes"] == planner.plan(problem, task.strategy).arena_bytes
        assert row["lower_bound"] == live
    table = list(csv.DictReader(io.StringIO(sweeps.to_csv(rows))))
    assert [int(r["arena_bytes"]) for r in table] == [r["arena_bytes"] for r in rows]
    assert [r["dims"] for r in table] == ["N=2", "N=2", "N=16", "N=16"]


def test_a_combination_the_model_cannot_take_is_a_row_with_its_error(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    (task,) = sweeps.tasks_of({"mlp": str(path)}, ["greedy_by_size"], [{}])  # N left unbound
    row = sweeps.plan_task(task)
    assert row["valid"] is False and row["arena_bytes"] is None and "N" in row["error"]
