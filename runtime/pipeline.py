"""Several models run one after the other in one arena, outputs connected to inputs without copies.

``Pipeline({"step": g1, "head": g2}, {"step:h": "head:h"})`` merges the models into one
`Graph`: every tensor and node is renamed ``"<model>:<name>"``, and a connected input is
renamed to the output feeding it, so the two are one tensor: written by the first model's
kernel, read by the second's, never copied. The merged graph is planned as one problem
(the models' activations share one arena; a connected tensor is live from its producer in
the first model to its last reader in the second) and run by one `Session`, so zero-copy
I/O, shared parameters, lazy inputs and the canary all work on a pipeline as on a model.

Pipeline inputs are the models' inputs that no connection feeds; pipeline outputs are the
models' outputs that no connection consumes. Models run in the order given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

import planner
from planner import Plan
from runtime.errors import ModelError
from runtime.graph import Graph, Node, TensorInfo
from runtime.options import MemoryOptions
from runtime.problem import memory_problem
from runtime.session import Session

SEPARATOR = ":"


class Pipeline:
    """Models in order plus connections ``{"a:out": "b:in"}``; see the module docstring.

    `options` and the other session keywords (canary, params, unbound with merged names, ...)
    pass through to the one `Session` that runs the merged graph."""

    def __init__(
        self,
        models: Mapping[str, Graph],
        connections: Mapping[str, str],
        plan: Plan | str = planner.DEFAULT_STRATEGY,
        options: MemoryOptions | None = None,
        **session_options: Any,
    ) -> None:
        self.models = dict(models)
        self.connections = dict(connections)
        self.graph = merge(self.models, self.connections)
        self.options = options or MemoryOptions()
        self.session = Session(self.graph, plan, self.options, **session_options)
        self._strategy = plan if isinstance(plan, str) else planner.DEFAULT_STRATEGY

    def prepare(self) -> Pipeline:
        self.session.prepare()
        return self

    def run(self, inputs: Mapping[str, np.ndarray] | None = None, **options: Any) -> dict[str, np.ndarray]:
        """Run every model in order; inputs and outputs are named ``"<model>:<tensor>"``."""
        return self.session.run(inputs, **options)

    def __getattr__(self, name: str) -> Any:
        # input_buffer, output_buffer, bind_input, bind_output, set_shared_input, stats, plan, arena
        if name in ("session", "graph", "models", "options"):
            raise AttributeError(name)
        return getattr(self.session, name)

    def separate_arena_bytes(self) -> dict[str, int]:
        """Arena bytes of each model planned alone (same strategy and options): the yardstick
        for the joint arena."""
        return {
            name: planner.plan(memory_problem(g, self.options), self._strategy).arena_bytes
            for name, g in self.models.items()
        }


def merge(models: Mapping[str, Graph], connections: Mapping[str, str]) -> Graph:
    """One graph running `models` in order, with each connected input replaced by its source."""
    if len(models) < 1:
        raise ModelError("a pipeline needs at least one model")
    for name in models:
        if not name or SEPARATOR in name:
            raise ModelError(f"model name {name!r}: must be non-empty and contain no {SEPARATOR!r}")
    rename = {m: {t: f"{m}{SEPARATOR}{t}" for t in g.tensors} for m, g in models.items()}
    feeds: dict[str, str] = {}  # merged destination name -> merged source name
    for source, dest in connections.items():
        (ma, ta), (mb, tb) = _check_connection(models, source, dest)
        if rename[mb][tb] in feeds:
            raise ModelError(f"connection {source!r} -> {dest!r}: {dest!r} is already fed by another connection")
        feeds[rename[mb][tb]] = rename[ma][ta]
        rename[mb][tb] = rename[ma][ta]
    sources = set(feeds.values())
    nodes = tuple(_node(m, n, rename[m]) for m, g in models.items() for n in g.nodes)
    consumers: dict[str, list[str]] = {}
    for n in nodes:
        for t in dict.fromkeys(n.inputs):
            if t:
                consumers.setdefault(t, []).append(n.name)
    tensors: dict[str, TensorInfo] = {}
    for m, g in models.items():
        for t, info in g.tensors.items():
            new = rename[m][t]
            if new in tensors:
                continue  # a connected input: the same tensor as its source
            kind = "activation" if new in sources else info.kind
            producer = f"{m}{SEPARATOR}{info.producer}" if info.producer else None
            tensors[new] = replace(
                info, name=new, kind=kind, producer=producer, consumers=tuple(consumers.get(new, ()))
            )
    inputs = tuple(rename[m][t] for m, g in models.items() for t in g.inputs if rename[m][t] not in sources)
    outputs = tuple(rename[m][t] for m, g in models.items() for t in g.outputs if rename[m][t] not in sources)
    constants = {rename[m][c]: replace(v, name=rename[m][c]) for m, g in models.items() for c, v in g.constants.items()}
    first = next(iter(models.values()))
    return Graph(
        name="+".join(models),
        nodes=nodes,
        tensors=tensors,
        inputs=inputs,
        outputs=outputs,
        constants=constants,
        opset=first.opset,
        dims={},
        max_tensor_bytes=max(g.max_tensor_bytes for g in models.values()),
        folded=sum(g.folded for g in models.values()),
    )


def _node(model: str, node: Node, rename: Mapping[str, str]) -> Node:
    return replace(
        node,
        name=f"{model}{SEPARATOR}{node.name}",
        inputs=tuple(rename[t] if t else "" for t in node.inputs),
        outputs=tuple(rename[t] if t else "" for t in node.outputs),
        proto=None,
    )


def _check_connection(models: Mapping[str, Graph], source: str, dest: str) -> tuple[tuple[str, str], tuple[str, str]]:
    where = f"connection {source!r} -> {dest!r}"
    order = list(models)
    parts = []
    for label, ref, role in (("source", source, "outputs"), ("destination", dest, "inputs")):
        model, sep, tensor = ref.partition(SEPARATOR)
        if not sep or model not in models:
            raise ModelError(f"{where}: {label} must be '<model>{SEPARATOR}<tensor>' with a model among {order}")
        names = getattr(models[model], role)
        if tensor not in names:
            raise ModelError(f"{where}: {tensor!r} is not one of model {model!r}'s {role} {list(names)}")
        parts.append((model, tensor))
    (ma, ta), (mb, tb) = parts
    if order.index(ma) >= order.index(mb):
        raise ModelError(f"{where}: model {ma!r} must run before model {mb!r}; models run in the order {order}")
    a, b = models[ma].tensors[ta], models[mb].tensors[tb]
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ModelError(
            f"{where}: {source!r} is {a.dtype}{list(a.shape)} but {dest!r} takes {b.dtype}{list(b.shape)}; "
            "connected tensors must have the same dtype and shape"
        )
    return (ma, ta), (mb, tb)
