"""Turning what a user hands memplan (a Problem .json, a MiniMalloc .csv, an ONNX or .tflite model)
into a planner.Problem, with the options every front end (CLI, REST) shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner import Problem, ProblemError
from planner.csvio import read_csv
from runtime import MemoryOptions

PROBLEM_SUFFIXES = (".json", ".csv")
MODEL_SUFFIXES = (".onnx", ".tflite")


class InputError(ValueError):
    """A user's input that memplan cannot take; the message says what is accepted."""


@dataclass(frozen=True)
class ModelOptions:
    """How to turn a model file into a problem: its input shapes and dims, its memory options, and
    its node order."""

    dims: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)  # whole input shapes, by input name
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    reorder: bool = False  # plan the nodes in a memory-aware order instead of the model's


def fused_nodes(graph: Any) -> dict[str, int]:
    """How many nodes each load-time fusion made (`runtime.fuse`)."""
    return dict(graph.fusions)


def parse_dims(text: str | None) -> dict[str, int]:
    """'batch=8,seq=128' -> {'batch': 8, 'seq': 128}."""
    dims: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--dims: {part.strip()!r} is not name=value (e.g. --dims batch=8,seq=128)")
        try:
            number = int(value)
        except ValueError:
            raise InputError(f"--dims: {name.strip()}={value!r} is not a whole number") from None
        if number <= 0:
            raise InputError(f"--dims: {name.strip()} must be a positive size, got {number}")
        dims[name.strip()] = number
    return dims


def parse_shapes(texts: list[str] | None) -> dict[str, list[int]]:
    """['x=1x3x48x320', ...] (the trtexec/polygraphy spelling) -> {'x': [1, 3, 48, 320]}.

    The name is everything before the last '='; 'x=' is a scalar. Which inputs exist and their
    ranks are checked when the model is loaded (`runtime.shapes.check_shapes`)."""
    shapes: dict[str, list[int]] = {}
    for text in texts or []:
        name, sep, sizes = text.rpartition("=")
        name = name.strip()
        if not sep or not name:
            raise InputError(f"--shape {text!r} is not NAME=sizes; write e.g. --shape x=1x3x640x640")
        if name in shapes:
            raise InputError(f"--shape {name}: given twice; give each input's shape once")
        dims: list[int] = []
        for axis, part in enumerate(sizes.split("x") if sizes.strip() else []):
            try:
                size = int(part)
            except ValueError:
                raise InputError(
                    f"--shape {text}: {part.strip()!r} (axis {axis}) is not a whole number; write e.g. "
                    f"--shape {name}=1x3x640x640"
                ) from None
            if size <= 0:
                raise InputError(f"--shape {text}: input {name!r} takes positive sizes, got {size} at axis {axis}")
            dims.append(size)
        shapes[name] = dims
    return shapes


def load_problem(
    path: Path, *, alignment: int | None = None, capacity: int | None = None, model: ModelOptions | None = None
) -> tuple[Problem, Any]:
    """The planning problem of a file, and the runtime graph when the file is a model.

    `alignment` overrides the problem's (None keeps it; a model's comes from `model.memory`);
    `capacity` bounds the first pool.
    """
    problem, graph, _ = load_problem_and_order(path, alignment=alignment, capacity=capacity, model=model)
    return problem, graph


def load_problem_and_order(
    path: Path, *, alignment: int | None = None, capacity: int | None = None, model: ModelOptions | None = None
) -> tuple[Problem, Any, Any]:
    """`load_problem`, and the memory-aware order's search (`planner.reorder.Reordered`: its
    method, whether proven optimal) when `model.reorder` asked for one, else None."""
    suffix = path.suffix.lower()
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder; expected a {', '.join(PROBLEM_SUFFIXES + MODEL_SUFFIXES)} file")
    graph = found = None
    if suffix == ".json":
        try:
            problem = Problem.loads(_read_text(path))
        except ProblemError as e:
            raise ProblemError(f"{path}: {e}") from None
        problem = problem if problem.name else problem.replace(name=path.stem)
    elif suffix == ".csv":
        problem, _ = read_csv(_read_text(path), source=str(path))
    elif suffix in MODEL_SUFFIXES:
        from app.services.graphs import problem_of_model

        options = model or ModelOptions()
        made = problem_of_model(path, options.memory, dims=options.dims, shapes=options.shapes, reorder=options.reorder)
        problem, graph, found = made.problem, made.graph, made.reordered
    else:
        accepted = ", ".join(PROBLEM_SUFFIXES + MODEL_SUFFIXES)
        raise InputError(f"{path}: unknown file type {suffix or '(none)'!r}; accepted: {accepted}")
    if model is not None and model.reorder and graph is None:
        raise InputError(
            f"{path}: --reorder needs an ONNX model; a bare problem has no data dependencies to reorder by"
        )
    if model is not None and model.shapes and graph is None:
        raise InputError(f"{path}: --shape binds a model's inputs; a bare problem has none")
    if alignment is not None and alignment != problem.alignment:
        if alignment < 1:
            raise InputError(f"--alignment must be a positive number of bytes, got {alignment}")
        problem = problem.replace(alignment=alignment)
    if capacity is not None:
        if capacity < 0:
            raise InputError(f"--capacity must be >= 0 bytes, got {capacity}")
        problem = problem.with_capacity(capacity)
    return problem, graph, found


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ProblemError(
            f"{path}: not UTF-8 text (byte {e.start}); expected a Problem JSON or a MiniMalloc CSV"
        ) from None
