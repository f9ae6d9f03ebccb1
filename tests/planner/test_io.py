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
from planner.csvio import load_csv, read_csv, write_csv

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
        (lambda d: d.update(alignment=64) or d["buffers"][2].update(alias_offset=8), "not a multiple of its alignment"),
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


# ---- the buffer limit -------------------------------------------------------------------


def test_the_buffer_limit_is_two_million_by_default():
    assert planner.MAX_BUFFERS == 2_000_000


def test_csv_over_the_limit_is_refused_at_the_first_row_past_it(tmp_path):
    rows = "".join(f"b{i},0,1,8\n" for i in range(4))
    text = "id,lower,upper,size\n" + rows + "this row is never parsed\n"
    with pytest.raises(ProblemError) as info:
        read_csv(text, source="big.csv", max_buffers=3)
    assert "big.csv: line 5: more than 3 buffers, the limit (max_buffers" in str(info.value)
    assert "planner.MAX_BUFFERS = 2,000,000" in str(info.value)
    path = tmp_path / "big.csv"
    path.write_text(text)
    with pytest.raises(ProblemError, match="line 5: more than 3 buffers"):
        load_csv(path, max_buffers=3)
    assert len(read_csv("id,lower,upper,size\n" + rows, max_buffers=4)[0].buffers) == 4
    assert len(read_csv("id,lower,upper,size\n" + rows, max_buffers=None)[0].buffers) == 4


def test_problem_json_over_the_limit_is_refused_before_its_buffers_are_read():
    data = {"buffers": ["not even an object"] * 4, "steps": 1}
    with pytest.raises(ProblemError, match="buffers: more than 3 buffers, the limit"):
        Problem.from_json(data, max_buffers=3)
    with pytest.raises(ProblemError, match="more than 3 buffers"):
        Problem.loads(json.dumps(data), max_buffers=3)
    with pytest.raises(ProblemError, match=r"buffers\[0\]: must be an object"):
        Problem.from_json(data, max_buffers=4)


# ---- MiniMalloc CSV of plans with aliases -------------------------------------------------

# An in-place chain (Clip, then Add written over it) beside a buffer live with both.
IN_PLACE = make_problem(
    [
        Buffer("Conv@0", 64, 0, 1),
        Buffer("Clip@0", 64, 1, 2, alias_of="Conv@0"),
        Buffer("Add@0", 64, 2, 3, alias_of="Clip@0"),
        Buffer("Other@0", 32, 1, 3),
        Buffer("Tail@0", 16, 3, 3, alias_of="Other@0", alias_offset=16),
    ]
)


def csv_rows(text: str) -> list[tuple[str, int, int, int, int]]:
    """(id, lower, upper, size, offset) of each row, read without memplan's reader."""
    lines = text.strip().splitlines()
    assert lines[0] == "id,lower,upper,size,offset"
    return [(i, int(a), int(b), int(s), int(o)) for i, a, b, s, o in (line.split(",") for line in lines[1:])]


def assert_rows_apart(rows: list[tuple[str, int, int, int, int]]) -> None:
    """MiniMalloc's validator: rows live at a common step share no byte."""
    for k, (i, lower, upper, size, offset) in enumerate(rows):
        for j, lower2, upper2, size2, offset2 in rows[k + 1 :]:
            meet = lower < upper2 and lower2 < upper
            share = offset < offset2 + size2 and offset2 < offset + size
            assert not (meet and share and size and size2), f"rows {i} and {j} overlap"


def test_csv_of_an_in_place_plan_has_one_row_per_alias_group():
    result = plan(IN_PLACE, "greedy_by_size")
    rows = csv_rows(write_csv(IN_PLACE, result))
    assert [r[:4] for r in rows] == [("Conv@0", 0, 4, 64), ("Other@0", 1, 4, 32)]
    assert rows[0][4] == result.offset("Conv@0") and rows[1][4] == result.offset("Other@0")
    assert_rows_apart(rows)
    assert result.alias_groups == {"Conv@0": ("Conv@0", "Clip@0", "Add@0"), "Other@0": ("Other@0", "Tail@0")}
    data = result.to_json()
    jsonschema.validate(data, PLAN_SCHEMA)
    assert Plan.from_json(data).alias_groups == result.alias_groups
    # A reader from before the field ignores it; a plan from before it reads as no groups.
    del data["alias_groups"]
    assert Plan.from_json(data).alias_groups == {}


@st.composite
def aliased_problems(draw):
    steps = draw(st.integers(1, 8))
    buffers: list[Buffer] = []
    for i in range(draw(st.integers(1, 12))):
        first = draw(st.integers(0, steps - 1))
        alias = draw(st.sampled_from([None, None, *[b.id for b in buffers]]))
        buffers.append(
            Buffer(
                f"b{i}",
                draw(st.integers(1, 40)),
                first,
                draw(st.integers(first, steps - 1)),
                alias_of=alias,
                alias_offset=draw(st.sampled_from([0, 8])) if alias else 0,
            )
        )
    return Problem(buffers=tuple(buffers), steps=steps, alignment=draw(st.sampled_from([1, 8])))


@pytest.mark.parametrize("strategy", [s for s in planner.names() if s not in ("optimal", "best")])
@settings(max_examples=40, deadline=None)
@given(problem=aliased_problems())
def test_csv_rows_of_any_plan_never_overlap(strategy, problem):
    result = plan(problem, strategy, **({"max_iterations": 5} if strategy == "hill_climb" else {}))
    rows = csv_rows(write_csv(problem, result))
    assert_rows_apart(rows)
    # One row per stretch of each group's profile, counted by hand: steps where the
    # furthest end among the group's live members changes.
    by_id = {b.id: b for b in problem.buffers}
    stretches = 0
    for root in {b.id for b in problem.buffers if b.alias_of is None}:
        members = [b for b in problem.buffers if _root_and_offset(by_id, b)[0] == root]
        heights = [
            max((_root_and_offset(by_id, b)[1] + b.size for b in members if b.first <= t <= b.last), default=0)
            for t in range(problem.steps)
        ]
        runs = [h for k, h in enumerate(heights) if h and (k == 0 or heights[k - 1] != h)]
        stretches += len(runs) or 1
    assert len(rows) == stretches


def _root_and_offset(by_id, b):
    offset = 0
    while b.alias_of is not None:
        offset += b.alias_offset
        b = by_id[b.alias_of]
    return b.id, offset


# ---- what MiniMalloc's reader cannot carry ------------------------------------------------


def minimalloc_fields(text: str) -> list[list[str]]:
    """Each line cut as MiniMalloc's FromCsv cuts it: at every newline, then every comma,
    no quoting; it stops at the first empty line."""
    lines = text.split("\n")
    return [line.split(",") for line in lines[: lines.index("")]]


# Each case: (id, the id as written) pairs, and over how many steps the buffers are spread.
@pytest.mark.parametrize(
    ("written", "steps"),
    [
        pytest.param(
            [
                ("a,b", "a%2Cb"),
                ('say "hi"', "say %22hi%22"),
                ("two\nlines", "two%0Alines"),
                ("cr\r", "cr%0D"),
                ("100%,", "100%25%2C"),
                ("p%2Cq", "p%252Cq"),  # would read back as "p,q" if written as it is
                ("50%", "50%"),  # the others as they are
                ("x#1", "x#1"),
                ("a b", "a b"),
                ("/conv/Conv_output_0", "/conv/Conv_output_0"),
            ],
            3,
            id="what-minimalloc-cannot-carry",
        ),
        # memplan's reader strips spaces around cells: the writer escapes an id's own spaces at
        # either end (as UTF-8 bytes), and leaves those inside it as they are.
        pytest.param(
            [
                (" lead", "%20lead"),
                ("trail ", "trail%20"),
                ("  both  ", "%20%20both%20%20"),
                ("in ner", "in ner"),  # a space inside an id is kept as it is
                (" ", "%20"),
                ("\ttab", "%09tab"),
                ("nbsp\xa0", "nbsp%C2%A0"),
                ("\u3000wide", "%E3%80%80wide"),
                (" 5% ", "%205%25%20"),
                ("%20", "%2520"),  # would read back as " " if written as it is
                ("a %25 b", "a %2525 b"),
                ("%", "%"),
            ],
            4,
            id="spaces-at-their-ends-and-percent-signs",
        ),
    ],
)
def test_ids_are_escaped_where_needed_and_read_back_exactly(written, steps, tmp_path):
    ids = [name for name, _ in written]
    problem = make_problem([Buffer(name, 8, k % steps, k % steps + 1) for k, name in enumerate(ids)])
    result = plan(problem, "greedy_by_size")
    text = write_csv(problem, result)
    rows = minimalloc_fields(text)
    assert all(len(fields) == 5 for fields in rows), rows
    assert [fields[0] for fields in rows[1:]] == [escaped for _, escaped in written]
    again, offsets = read_csv(text)
    assert [b.id for b in again.buffers] == ids and again.buffers == problem.buffers
    assert offsets == {b: p.offset for b, p in result.offsets.items()}
    assert {p["id"] for p in result.to_json()["placements"]} == set(ids)  # the Plan JSON keeps them exact
    path = tmp_path / "ids.csv"
    path.write_text(text)
    assert load_csv(path).buffers == problem.buffers


def test_spaces_around_cells_of_a_hand_written_file_are_read_past():
    text = " id , lower ,upper, size ,offset\n  b1 , 0 , 3 , 4 , 8 \nb2,\t3,9 ,4,0\n"
    problem, offsets = read_csv(text)
    assert problem.buffers == (Buffer("b1", 4, 0, 2), Buffer("b2", 4, 3, 8))
    assert offsets == {"b1": 8, "b2": 0}


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(
        st.text(alphabet=',"\n\r%2CAD05#ab \t\xa0\u3000', min_size=1, max_size=8), min_size=1, max_size=6, unique=True
    )
)
def test_any_id_survives_minimalloc_and_memplan_readers(ids):
    problem = make_problem([Buffer(name, 4, 0, 0) for name in ids])
    text = write_csv(problem, plan(problem, "naive"))
    rows = minimalloc_fields(text)
    assert len(rows) == len(ids) + 1 and all(len(fields) == 5 for fields in rows)
    assert len({fields[0] for fields in rows}) == len(rows)  # distinct ids for MiniMalloc too
    assert [b.id for b in read_csv(text)[0].buffers] == ids


def test_plan_in_two_pools_is_refused_naming_them():
    two = make_problem(
        [Buffer("w", 64, 0, 1, pool_candidates=("sram",)), Buffer("x", 64, 0, 1, pool_candidates=("dram",))],
        pools=(Pool("sram"), Pool("dram")),
    )
    result = plan(two, "greedy_by_size")
    assert {p.pool for p in result.offsets.values()} == {"sram", "dram"}
    assert result.offset("w") == result.offset("x") == 0  # the offsets of two address spaces
    with pytest.raises(ProblemError) as info:
        write_csv(two, result)
    message = str(info.value)
    assert "2 pools ('dram': 1 buffer, 'sram': 1 buffer)" in message and "Plan JSON" in message
    with pytest.raises(ProblemError, match=r"this problem has 2 \('sram', 'dram'\).*Problem JSON"):
        write_csv(two)
    # Two pools of which the plan uses one: the file is that pool's address space.
    one = make_problem([Buffer("w", 64, 0, 1), Buffer("x", 64, 0, 1)], pools=(Pool("sram"), Pool("dram")))
    result = plan(one, "greedy_by_size")
    assert {p.pool for p in result.offsets.values()} == {"sram"}
    assert_rows_apart(csv_rows(write_csv(one, result)))


def test_piece_names_never_take_the_id_of_a_buffer():
    # x's group is two pieces (x, then y on top of it): its second would be "x#1", the id of
    # another buffer, and "x##1" then; "x#1"'s own group then avoids the rows already named.
    collide = make_problem(
        [
            Buffer("x", 8, 0, 0),
            Buffer("y", 16, 1, 1, alias_of="x"),
            Buffer("x#1", 4, 0, 1),
            Buffer("z", 8, 2, 2, alias_of="x#1"),
            Buffer("x#1#1", 4, 0, 2),
        ]
    )
    result = plan(collide, "greedy_by_size")
    rows = csv_rows(write_csv(collide, result))
    assert [r[0] for r in rows] == ["x", "x##1", "x#1", "x#1##1", "x#1#1"]
    assert_rows_apart(rows)
    read_csv(write_csv(collide, result))  # would refuse a duplicate id
    # Without a collision the pieces are root#1, root#2..., as they always were.
    plain = collide.replace(buffers=collide.buffers[:2])
    assert [r[0] for r in csv_rows(write_csv(plain, plan(plain, "greedy_by_size")))] == ["x", "x#1"]
