"""One arena for the sessions of one model at several batch sizes.

Each batch size is its own graph and plan (shapes are static), but the sessions never run
at the same time, so they can all live in one arena sized to the largest plan instead of
one arena each. Parameters go through one `ParameterStore`, so the weights are held once
too. Running two of these sessions concurrently would corrupt both: they share bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np

import planner
from runtime.arena import aligned_arena
from runtime.errors import ModelError
from runtime.graph import Graph
from runtime.options import DEFAULT_ALIGNMENT, MemoryOptions
from runtime.params import ParameterStore
from runtime.problem import memory_problem
from runtime.session import Session


class BatchSessions:
    """Sessions of the model at `path` for each batch size in `batches`, bound by `dim`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        batches: Iterable[int],
        *,
        dim: str = "N",
        strategy: str = planner.DEFAULT_STRATEGY,
        options: MemoryOptions | None = None,
        params: ParameterStore | None = None,
        **session_options: Any,
    ) -> None:
        self.batches = sorted(set(batches))
        if not self.batches or self.batches[0] < 1:
            raise ModelError(f"batches={self.batches}: give one or more batch sizes >= 1")
        self.params = params if params is not None else ParameterStore()
        self.options = options or MemoryOptions()
        graphs: dict[int, Graph] = {
            b: self.params.load_model(path, {dim: b}, fuse=self.options.fuse) for b in self.batches
        }
        plans = {b: planner.plan(memory_problem(g, self.options), strategy) for b, g in graphs.items()}
        self.separate_bytes = {b: p.arena_bytes for b, p in plans.items()}
        self.arena = aligned_arena(max(self.separate_bytes.values()), max(self.options.alignment, DEFAULT_ALIGNMENT))
        self.sessions = {
            b: Session(graphs[b], plans[b], self.options, arena=self.arena, **session_options).prepare()
            for b in self.batches
        }

    @property
    def arena_bytes(self) -> int:
        return int(self.arena.size)

    def session(self, batch: int) -> Session:
        if batch not in self.sessions:
            raise ModelError(f"batch size {batch} was not prepared; prepared sizes are {self.batches}")
        return self.sessions[batch]

    def run(self, batch: int, inputs: dict[str, np.ndarray] | None = None, **options: Any) -> dict[str, np.ndarray]:
        """Run the session of `batch`; outputs are fresh copies unless that session was told otherwise."""
        return self.session(batch).run(inputs, **options)
