"""Chart columns of big plans on disk, under the data folder, where every app process finds them.

Layout::

    columns/<problem id>/problem.npz    the problem's columns (ids, lifetimes, sizes, kinds, live curve)
    columns/<problem id>/<plan id>.npz  a plan's offsets in problem order (and its pool sizes); the rest follows
    columns/<problem id>/head.json      what a plan page reads of the problem besides its columns (name, counts,
                                        step names, pools): the page never parses the stored problem

Stored problems and plans never change, so a record's id names its content as a hash would, without
hashing tens of MB. A file is written whole under a temporary name and renamed (a reader never sees
half of one): at planning time by the process that planned, or by the first process that had to build
it. Any process reads it on a plan page's first open. `prune` removes the folders of problems whose
plans are gone (a model's plans go with the model), and a reader refuses the file of a deleted plan
because it asks the database first (`chart_windows`).
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from app.storage import Storage, new_id

FOLDER = "columns"
PROBLEM = "problem"  # the problem's own file in its folder
HEAD = "head"  # the problem's head (JSON) in its folder


def folder(storage: Storage) -> Path:
    return storage.root / FOLDER


def path(storage: Storage, problem_id: str, name: str, suffix: str = ".npz") -> Path:
    """The file of `name` (PROBLEM, HEAD or a plan id) among the columns of problem `problem_id`."""
    for part in (problem_id, name):
        if not part or "/" in part or "\\" in part or part.startswith("."):
            raise ValueError(f"{part!r} is not a record id: column files are named by problem and plan ids")
    return folder(storage) / problem_id / f"{name}{suffix}"


def _write(target: Path, write: Callable[[BinaryIO], object]) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{new_id()}.part")
    try:
        with temp.open("wb") as f:
            write(f)
        os.replace(temp, target)  # atomic: a reader sees the whole file or none
    finally:
        temp.unlink(missing_ok=True)
    return target


def save(storage: Storage, problem_id: str, name: str, arrays: dict[str, Any]) -> Path:
    # uncompressed: read back at disk speed
    return _write(path(storage, problem_id, name), lambda f: np.savez(f, **arrays))


def save_head(storage: Storage, problem_id: str, head: dict[str, Any]) -> Path:
    text = json.dumps(head, separators=(",", ":")).encode("utf-8")
    return _write(path(storage, problem_id, HEAD, ".json"), lambda f: f.write(text))


def load_head(storage: Storage, problem_id: str) -> dict[str, Any] | None:
    """The problem's head, or None when there is none (or it cannot be read: the page reads the problem)."""
    try:
        head = json.loads(path(storage, problem_id, HEAD, ".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return head if isinstance(head, dict) else None


def load(storage: Storage, problem_id: str, name: str) -> dict[str, np.ndarray] | None:
    """The arrays stored under `name`, or None when there is no such file (or it cannot be read:
    the caller builds the columns again and writes it anew)."""
    source = path(storage, problem_id, name)
    try:
        with np.load(source, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile):
        return None


def prune(storage: Storage) -> int:
    """Remove the column folders of problems none of whose stored plans remains; how many went."""
    removed = 0
    root = folder(storage)
    if not root.is_dir():
        return 0
    for problem in sorted(root.iterdir()):
        if not problem.is_dir():
            continue
        plans = [p.stem for p in problem.glob("*.npz") if p.stem != PROBLEM]
        if not any(storage.get_plan(plan_id, placements=False) for plan_id in plans):
            shutil.rmtree(problem, ignore_errors=True)
            removed += 1
    return removed
