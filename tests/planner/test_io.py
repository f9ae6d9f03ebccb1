"""Problem and Plan JSON (with the checked-in schemas), MiniMalloc CSV, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner import Buffer, Plan, Pool, Problem, ProblemError, check_plan, make_problem, plan
from planner.csvio import read_csv, write_csv

SCHEMAS = Path(planner.__file__).parent / "schema"
PROBLEM_SCHEMA = json.loads((SCHEMAS / "problem.schema.json").read_text())
PLAN_SCHEMA = json.loads((SCHEMAS / "plan.schema.json").read_text())

MINIMALLOC_README = """id,lower,upper,size
b1,0,3,4
b2,3,9,4
b3,0,9,4
b4,9,21,4
b5,0,21,4
"""

RICH = make_problem(
    [
        Buffer("in", 100, 0, 3, kind="input", name="images:0"),
        Buffer("ws", 50, 1, 1, kind="workspace", alignment=32, pool_candidates=("sram", "dram")),
        Buffer("r", 100, 1, 3, kind="activation", alias_of="in"),
        Buffer("out", 10, 2, 3, kind="output"),
    ],
    alignment=16,
    pools=(Pool("sram", 4096), Pool("dram")),
    step_names=("conv", "relu", "pool", "fc"),
    name="tiny",
)


def test_problem_json_round_trip_and_schema():
    data = RICH.to_json()
    jsonschema.validate(data, PROBLEM_SCHEMA)
    again = Problem.loads(json.dumps(data))
    assert again == RICH and again.to_json() == data


def test_plan_json_round_trip_and_schema():
    result = plan(RICH, "greedy_by_size")
    data = result.to_json()
    jsonschema.validate(data, PLAN_SCHEMA)
    again = Plan.loads(json.dumps(data))
    assert again.offsets == result.offsets and again.pool_sizes == result.pool_sizes
    assert check_plan(RICH, again).ok


@st.composite
def json_problems(draw):
    n = draw(st.integers(0, 8))
    steps = draw(st.integers(1, 10))
    buffers = []
    for i in range(n):
        first = draw(st.integers(0, steps - 1))
        buffers.append(
            Buffer(
                f"b{i}",
                draw(st.integers(0, 10**12)),
                first,
                draw(st.integers(first, steps - 1)),
                kind=draw(st.sampled_from(planner.problem.KINDS)),
            )
        )
    return Problem(buffers=tuple(buffers), steps=steps, alignment=draw(st.integers(1, 4096)))


@settings(max_examples=50, deadline=None)
@given(problem=json_problems())
def test_any_problem_round_trips(problem):
    data = json.loads(problem.dumps())
    jsonschema.validate(data, PROBLEM_SCHEMA)
    assert Problem.from_json(data) == problem


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d["buffers"][0].update(size=-1), "size must be >= 0"),
        (lambda d: d["buffers"][0].update(first=3, last=1), "last (1) is before first (3)"),
        (lambda d: d["buffers"].append(dict(d["buffers"][0])), "duplicate id"),
        (lambda d: d["buffers"][0].pop("size"), "missing field 'size'"),
        (lambda d: d["buffers"][0].update(size="big"), "size: must be an integer"),
        (lambda d: d["buffers"][0].update(colour="red"), "unknown field(s) ['colour']"),
        (lambda d: d.update(alignment=0), "alignment: must be a positive number"),
        (lambda d: d.update(schema="memplan.problem/9"), "unknown version"),
        (lambda d: d["buffers"][1].update(pool_candidates=["l3"]), "unknown pool 'l3'"),
        (lambda d: d["buffers"][2].update(alias_of="nobody"), "unknown buffer 'nobody'"),
        (lambda d: d.update(steps=2, step_names=["a", "b"]), "must be < steps (2)"),
    ],
)
def test_bad_problem_json_names_the_field(mutate, words):
    data = RICH.to_json()
    mutate(data)
    with pytest.raises(ProblemError) as info:
        Problem.from_json(data)
    assert words in str(info.value)


def test_bad_problem_json_is_rejected_by_the_schema_too():
    data = RICH.to_json()
    data["buffers"][0]["size"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, PROBLEM_SCHEMA)


def test_not_json_at_all():
    with pytest.raises(ProblemError, match="not valid JSON: .* line 1"):
        Problem.loads("{buffers: ")


def test_minimalloc_readme_example_round_trips_and_plans_to_12():
    problem, offsets = read_csv(MINIMALLOC_README, source="input.12.csv")
    assert offsets is None
    assert [(b.id, b.first, b.last, b.size) for b in problem.buffers][0] == ("b1", 0, 2, 4)
    assert write_csv(problem) == MINIMALLOC_README
    bounded = problem.with_capacity(12)
    result = plan(bounded, "greedy_by_size")
    assert result.arena_bytes == 12 and check_plan(bounded, result).ok
    text = write_csv(problem, result)
    again, placed = read_csv(text)
    assert again.buffers == problem.buffers
    assert placed == {b: p.offset for b, p in result.offsets.items()}


def test_newer_minimalloc_header_is_read():
    problem, _ = read_csv("buffer,start,end,size\nx,0,2,8\n")
    assert problem.buffers[0] == Buffer("x", 8, 0, 1)


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty file"),
        ("name,from,to,bytes\na,0,1,4\n", "line 1: header"),
        ("id,lower,upper,size\na,0,1\n", "line 2: 3 fields, expected 4"),
        ("id,lower,upper,size\na,0,x,4\n", "line 2: upper 'x' is not an integer"),
        ("id,lower,upper,size\na,0,1,4\na,1,2,4\n", "line 3: duplicate id 'a' (first on line 2)"),
        ("id,lower,upper,size\na,3,3,4\n", "line 2: interval [3, 3) is empty"),
        ("id,lower,upper,size\na,0,3,-4\n", "line 2: size must be >= 0"),
    ],
)
def test_bad_csv_names_the_line(text, words):
    with pytest.raises(ProblemError) as info:
        read_csv(text, source="trace.csv")
    assert "trace.csv" in str(info.value) and words in str(info.value)
