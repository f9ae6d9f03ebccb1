"""Model file -> graph -> planning problem: the cached graphs of model files, and the problem a
graph gives under memory options.

`problem_of_model` is the one road from a model file to its memory problem, for the CLI and
REST alike: it raises the runtime's own errors, which each face words in its own spelling
(`model_errors` turns them into 422 answers naming what the model does that memplan cannot
take; the CLI names its flags).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
GraphKey = tuple[str, tuple[tuple[str, int], ...], tuple[tuple[str, tuple[int, ...]], ...], bool, int | None]
_graphs: LRU[GraphKey, Any] = LRU(GRAPH_CACHE)


@dataclass(frozen=True)
class ModelProblem:
    """A model file's memory problem, the graph it was made from (its nodes in the order planned),
    and the memory-aware order's search (`planner.reorder.Reordered`) when one was asked for."""

    problem: Problem
    graph: Any
    reordered: Any = None


def problem_of_model(
    path: Path,
    memory: MemoryOptions,
    *,
    dims: dict[str, int] | None = None,
    shapes: dict[str, list[int]] | None = None,
    reorder: bool = False,
    order: list[int] | None = None,
    pools: list[dict[str, Any]] | None = None,
    name: str = "",
    max_tensor_bytes: int | None = None,
) -> ModelProblem:
    """The one road from a model file to its memory problem: the graph (`graph_of`, cached), its
    nodes in a memory-aware order when `reorder` asks for one or in a stored `order`, then the
    problem under `memory`, named `name` (else the graph's name) with `pools` when given.
    Raises the runtime's errors (`runtime.ModelError`, `runtime.UnboundDimError`)."""
    graph = graph_of(path, dims or {}, shapes=shapes, fuse=memory.fuse, max_tensor_bytes=max_tensor_bytes)
    reordered = None
    if reorder:
        graph, reordered = runtime.reorder_graph(graph, memory)
    else:
        graph = in_order(graph, order)
    problem = runtime.memory_problem(graph, memory)
    changes: dict[str, Any] = {"name": name or problem.name}  # the stored model's name, not the graph's doc name
    if pools:
        changes["pools"] = tuple(Pool(p["name"], p.get("capacity")) for p in pools)
    return ModelProblem(problem.replace(**changes), graph, reordered)


def graph_of(
    path: Path,
    dims: dict[str, int],
    *,
    shapes: dict[str, list[int]] | None = None,
    fuse: bool = True,
    max_tensor_bytes: int | None = None,
) -> Any:
    """The runtime graph of a model file with its inputs bound (whole `shapes` by input name, and
    symbolic `dims` by name) and its load-time fusions applied unless `fuse` is False; cached by
    all of them. `max_tensor_bytes` bounds a tensor (None: the runtime's default). Raises the
    runtime's errors."""
    bound = tuple(sorted((name, tuple(int(d) for d in sizes)) for name, sizes in (shapes or {}).items()))
    key = (str(path), tuple(sorted(dims.items())), bound, fuse, max_tensor_bytes)
    found = _graphs.get(key)
    if found is not None:
        return found
    if max_tensor_bytes is None:
        graph = runtime.load_model(path, dims=dims, shapes=shapes, fuse=fuse)
    else:
        graph = runtime.load_model(path, dims=dims, shapes=shapes, fuse=fuse, max_tensor_bytes=max_tensor_bytes)
    return _graphs.put(key, graph)


@contextmanager
def model_errors() -> Iterator[None]:
    """The runtime's errors about a model as 422 answers, in the REST bodies' spelling."""
    try:
        yield
    except runtime.UnboundDimError as e:
        how = e.describe(
            lambda name, sizes: f"shapes {json.dumps({name: list(sizes)})}", lambda d: f"dims {{{json.dumps(d)}: size}}"
        )
        raise AppError(422, f"the model cannot be planned: {how}", title="Unbound input dims") from None
    except runtime.ModelError as e:
        raise AppError(422, f"the model cannot be planned: {e}", title="Unsupported model") from None


def load_graph(
    path: Path, dims: dict[str, int], *, shapes: dict[str, list[int]] | None = None, fuse: bool = True
) -> Any:
    """`graph_of` a stored model under the service's tensor limit, its errors as 422 answers."""
    with model_errors():
        return graph_of(path, dims, shapes=shapes, fuse=fuse, max_tensor_bytes=active_limits().max_tensor_bytes)


def stored_model_problem(path: Path, memory: MemoryOptions, **options: Any) -> ModelProblem:
    """`problem_of_model` of a stored model under the service's tensor limit, its errors as 422
    answers."""
    with model_errors():
        return problem_of_model(path, memory, max_tensor_bytes=active_limits().max_tensor_bytes, **options)


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


def model_problem(graph: Any, memory: MemoryOptions, *, name: str) -> Problem:
    """The planning problem of a graph made in memory (a pipeline's joint graph) under the request's
    memory options; a model file's goes through `problem_of_model`."""
    with model_errors():
        problem = runtime.memory_problem(graph, memory)
    return problem.replace(name=name or problem.name)


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
