"""Irregularly wired graphs as schedules, to measure memory-aware ordering on.

Networks found by architecture search or wired at random (RandWire, Xie et al. 2019; NAS cells)
are DAGs with many branches and tensors of unlike sizes; their exporters write the ops in a
plain topological order that knows nothing of memory. The recipe, as RandWire's:

1. An undirected random graph on `n` nodes: Watts-Strogatz (a ring where each node meets its
   `k` nearest, each edge rewired with probability `p`) or Erdos-Renyi (each pair joined with
   probability `p`).
2. Each edge points from the lower node number to the higher: a DAG.
3. Each node is one op that reads its predecessors' tensors (the graph input when it has
   none) and writes one tensor of a size drawn from `sizes` (bytes); with probability
   `scratch` it also uses scratch of up to half its output. Nodes nobody reads feed one final
   "out" op, whose tensor is the graph output.
4. The schedule's order is a plain topological sort (Kahn's, first-in first-out), as
   exporters write: no node waits for its inputs' other readers.

Deterministic: the same arguments give the same schedule.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from planner.errors import ProblemError
from planner.lifetimes import Schedule, Step

MODELS = ("ws", "er")
DEFAULT_SIZES = (4_096, 16_384, 65_536, 262_144, 1_048_576)


def random_wiring(
    n: int,
    *,
    model: str = "ws",
    k: int = 4,
    p: float = 0.25,
    seed: int = 0,
    sizes: tuple[int, ...] = DEFAULT_SIZES,
    scratch: float = 0.2,
) -> Schedule:
    """A RandWire-style schedule of `n` ops plus the final "out" op (see the module doc)."""
    if model not in MODELS:
        raise ProblemError(f"model {model!r}: accepted models are {MODELS}")
    if n < 1 or not 0 <= p <= 1 or not 0 <= scratch <= 1 or not sizes or min(sizes) < 0:
        raise ProblemError(
            f"n must be >= 1, p and scratch in [0, 1], sizes non-empty and >= 0; got n={n}, p={p}, "
            f"scratch={scratch}, sizes={sizes}"
        )
    if model == "ws" and not 0 <= k < n and n > 1:
        raise ProblemError(f"k={k}: a Watts-Strogatz ring of {n} nodes takes 0 <= k < n")
    rng = np.random.default_rng(seed)
    edges = _watts_strogatz(n, k, p, rng) if model == "ws" else _erdos_renyi(n, p, rng)
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in sorted(edges):
        preds[b].append(a)
    order = _kahn_fifo(n, preds)
    size_of = rng.choice(np.array(sizes, dtype=np.int64), size=n)
    uses_scratch = rng.random(n) < scratch
    scratch_part = rng.random(n)
    steps, table = [], {"in": int(rng.choice(np.array(sizes, dtype=np.int64)))}
    read: set[int] = set()
    for node in order:
        reads = tuple(f"t{a}" for a in preds[node]) or ("in",)
        read.update(preds[node])
        extra: tuple[str, ...] = ()
        table[f"t{node}"] = int(size_of[node])
        if uses_scratch[node]:
            extra = (f"s{node}",)
            table[f"s{node}"] = max(1, int(size_of[node] * scratch_part[node] / 2))
        steps.append(Step(f"op{node}", reads=reads, writes=(f"t{node}",), scratch=extra))
    sinks = tuple(f"t{node}" for node in order if node not in read)
    steps.append(Step("out", reads=sinks, writes=("out",)))
    table["out"] = int(max(sizes))
    return Schedule(steps=steps, sizes=table, inputs=("in",), outputs=("out",))


def _watts_strogatz(n: int, k: int, p: float, rng: np.random.Generator) -> set[tuple[int, int]]:
    edges: set[tuple[int, int]] = set()
    for a in range(n):
        for j in range(1, k // 2 + 1):
            b = (a + j) % n
            if a != b:
                edges.add((min(a, b), max(a, b)))
    for edge in sorted(edges):
        if rng.random() < p:
            a = edge[0]
            choices = [c for c in range(n) if c != a and (min(a, c), max(a, c)) not in edges]
            if choices:
                c = int(rng.choice(choices))
                edges.discard(edge)
                edges.add((min(a, c), max(a, c)))
    return edges


def _erdos_renyi(n: int, p: float, rng: np.random.Generator) -> set[tuple[int, int]]:
    joined = rng.random((n, n)) < p
    return {(a, b) for a in range(n) for b in range(a + 1, n) if joined[a, b]}


def _kahn_fifo(n: int, preds: list[list[int]]) -> list[int]:
    waiting = [len(set(p)) for p in preds]
    succs: list[list[int]] = [[] for _ in range(n)]
    for b, ps in enumerate(preds):
        for a in sorted(set(ps)):
            succs[a].append(b)
    queue = deque(node for node in range(n) if waiting[node] == 0)
    order = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for s in succs[node]:
            waiting[s] -= 1
            if waiting[s] == 0:
                queue.append(s)
    return order
