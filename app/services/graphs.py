"""Stored model -> graph -> planning problem: the cached graphs of stored models, and the
problem a graph gives under memory options.

Runtime errors about a model become 422 answers naming what the model does that memplan
cannot take.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import runtime
from app.errors import AppError
from app.services.cache import LRU
from app.settings import active_limits
from planner import Pool, Problem
from runtime import MemoryOptions

MEMORY_FIELDS = frozenset(f.name for f in dataclasses.fields(MemoryOptions))

GRAPH_CACHE = 4  # graphs of big models hold their folded constants: keep only a few
GraphKey = tuple[str, tuple[tuple[str, int], ...], tuple[tuple[str, tuple[int, ...]], ...], bool]
_graphs: LRU[GraphKey, Any] = LRU(GRAPH_CACHE)


def load_graph(
    path: Path, dims: dict[str, int], *, shapes: dict[str, list[int]] | None = None, fuse: bool = True
) -> Any:
    """The runtime graph of a stored model with its inputs bound (whole `shapes` by input name, and
    symbolic `dims` by name) and its load-time fusions applied unless `fuse` is False; cached by
    all of them."""
    bound = tuple(sorted((name, tuple(int(d) for d in sizes)) for name, sizes in (shapes or {}).items()))
    key = (str(path), tuple(sorted(dims.items())), bound, fuse)
    found = _graphs.get(key)
    if found is not None:
        return found
    try:
        graph = runtime.load_model(
            path, dims=dims, shapes=shapes, fuse=fuse, max_tensor_bytes=active_limits().max_tensor_bytes
        )
    except runtime.UnboundDimError as e:
        how = e.describe(
            lambda name, sizes: f"shapes {json.dumps({name: list(sizes)})}", lambda d: f"dims {{{json.dumps(d)}: size}}"
        )
        raise AppError(422, f"the model cannot be planned: {how}", title="Unbound input dims") from None
    except runtime.ModelError as e:
        raise AppError(422, f"the model cannot be planned: {e}", title="Unsupported model") from None
    return _graphs.put(key, graph)


def in_order(graph: Any, order: list[int] | None) -> Any:
    """`graph` with its nodes in `order` (indices into its own nodes), the order a plan was made for
    (`PlanRequest.reorder`); `graph` itself when `order` is None."""
    if order is None:
        return graph
    if sorted(order) != list(range(len(graph.nodes))):
        raise AppError(409, f"the stored node order does not fit this model's {len(graph.nodes)} nodes; plan it again")
    return dataclasses.replace(graph, nodes=tuple(graph.nodes[i] for i in order))


def forget(path: Path) -> None:
    """Drop cached graphs of a deleted model."""
    _graphs.forget(lambda key: key[0] != str(path))


def memory_of(options: dict[str, Any]) -> MemoryOptions:
    """The memory options among a stored request's options (older records lack some: defaults)."""
    return MemoryOptions.from_json({k: v for k, v in options.items() if k in MEMORY_FIELDS})


def model_problem(graph: Any, memory: MemoryOptions, *, pools: list[dict[str, Any]] | None, name: str) -> Problem:
    """The planning problem of a graph under the page's or the request's memory options."""
    try:
        problem = runtime.memory_problem(graph, memory)
    except runtime.ModelError as e:
        raise AppError(422, f"the model cannot be planned: {e}", title="Unsupported model") from None
    changes: dict[str, Any] = {"name": name or problem.name}  # the stored model's name, not the graph's doc name
    if pools:
        changes["pools"] = tuple(Pool(p["name"], p.get("capacity")) for p in pools)
    return problem.replace(**changes)


def tensor_facts(graph: Any, problem: Problem) -> dict[str, dict[str, Any]]:
    """For every buffer that is a graph tensor: shape, dtype, producer and consumers (for hover)."""
    tensors = getattr(graph, "tensors", {}) or {}
    facts: dict[str, dict[str, Any]] = {}
    for b in problem.buffers:
        info = tensors.get(b.id)
        if info is None:
            # Kernel scratch and other runtime buffers: the step that uses it is its owner.
            owner = problem.step_names[b.first] if problem.step_names else None
            facts[b.id] = {
                "shape": [b.size],
                "dtype": "uint8",
                "producer": owner,
                "consumers": [owner] if owner else [],
            }
            continue
        consumers = list(getattr(info, "consumers", ()) or ())
        facts[b.id] = {
            "shape": [int(d) if isinstance(d, int) else str(d) for d in (getattr(info, "shape", ()) or ())],
            "dtype": str(getattr(info, "dtype", "")),
            "producer": getattr(info, "producer", None),
            "consumers": consumers[:12] + ([f"... {len(consumers) - 12} more"] if len(consumers) > 12 else []),
        }
    return facts


def graph_facts(graph: Any) -> dict[str, Any]:
    """What the runtime adds to the model summary: tensors and bytes by kind."""
    tensors = getattr(graph, "tensors", {}) or {}
    by_kind: dict[str, int] = {}
    for info in tensors.values():
        kind = str(getattr(info, "kind", "activation"))
        by_kind[kind] = by_kind.get(kind, 0) + int(getattr(info, "nbytes", 0) or 0)
    return {
        "tensor_count": len(tensors),
        "bytes_by_kind": dict(sorted(by_kind.items())),
        "steps": len(getattr(graph, "nodes", ()) or ()),
    }
