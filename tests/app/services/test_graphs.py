"""One road from a model file to its memory problem (`graphs.problem_of_model`): the CLI's
`inputs.load_problem` and a REST plan of the uploaded model give the problem the runtime itself
makes of the file, and each face words an unbound dim in its own spelling."""

from __future__ import annotations

import pytest

import runtime
from app.services.graphs import problem_of_model
from app.services.inputs import ModelOptions, load_problem
from planner import Problem
from tests.memory_models import mlp, save

MEMORY = runtime.MemoryOptions(alignment=128, inplace=False)


def _buffers(problem: Problem) -> list[tuple[str, int, int, int, str]]:
    return sorted((b.id, b.size, b.first, b.last, b.kind) for b in problem.buffers)


def test_the_cli_and_rest_give_the_problem_the_runtime_makes(client, tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    oracle = runtime.memory_problem(runtime.load_model(path, dims={"N": 4}), MEMORY)
    cli, graph = load_problem(path, model=ModelOptions(dims={"N": 4}, memory=MEMORY))
    assert graph is not None and _buffers(cli) == _buffers(oracle) and cli.alignment == 128

    model_id = client.post("/api/v1/models", files={"file": ("mlp.onnx", path.read_bytes())}).json()["id"]
    body = {"strategies": ["greedy_by_size"], "dims": {"N": 4}, "alignment": 128, "inplace": False}
    made = client.post(f"/api/v1/models/{model_id}/plans", json=body)
    assert made.status_code == 200, made.text
    stored = client.get(f"/api/v1/problems/{made.json()['problem_id']}").json()
    rest = Problem.from_json(stored["problem"])
    assert _buffers(rest) == _buffers(oracle) and rest.alignment == 128
    assert rest.name == "mlp"  # the stored model's name


def test_a_stored_order_and_pools_are_applied_on_the_same_road(tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    made = problem_of_model(
        path, MEMORY, dims={"N": 2}, order=[0, 1, 2, 3, 4], pools=[{"name": "sram", "capacity": 1 << 20}], name="m"
    )
    assert made.problem.name == "m" and [p.name for p in made.problem.pools] == ["sram"]
    assert made.problem.pools[0].capacity == 1 << 20 and made.reordered is None
    assert [n.name for n in made.graph.nodes] == ["mm1", "relu", "mm2", "bias", "softmax"]


def test_an_unbound_dim_is_worded_by_each_face(client, tmp_path):
    path = save(mlp(), tmp_path / "mlp.onnx")
    with pytest.raises(runtime.UnboundDimError):
        load_problem(path, model=ModelOptions(memory=MEMORY))
    model_id = client.post("/api/v1/models", files={"file": ("mlp.onnx", path.read_bytes())}).json()["id"]
    r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size"]})
    assert r.status_code == 422 and '"N"' in r.json()["detail"] and "dims" in r.json()["detail"], r.text
