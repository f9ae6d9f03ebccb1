"""The steps a `runtime.Session` runs, made once when it prepares.

A `Step` is one node of the schedule with everything its kernel call needs fixed: the slot each
input is read from, the arena view (or the slot of an outside output) each output is written
into, its workspace view, its parsed attributes and the constants its kernel prepared. The
session binds each step into one call (`runtime.step_calls`) and runs those calls in a flat loop.

- `prepare_kernels` calls each kernel's prepare and constants hooks once per node.
- `make_step` fixes one node's step over the arena views; a view op whose output already is
  its input's bytes is skipped, and a Concat planned in place copies only what is not yet in
  its slice (`runtime.concat_in_place`).
- `canary_writes` says what each step may write, for the canary; `after_hooks` places the
  ``after_node=`` hooks by step index, and `copying_hooks` adds a capture's copies to them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner import Problem
from planner.aliases import alias_roots
from runtime.arena import address
from runtime.concat_in_place import concat_in_place
from runtime.errors import ModelError
from runtime.graph import Graph, Node
from runtime.kernels import Kernel, weights_kwargs
from runtime.params import PreparedConstants
from runtime.problem import node_metas, workspace_id

AfterNode = Callable[[], None]  # runs right after its node, before the next step; may raise to stop the run


@dataclass
class Step:
    node: Node
    kernel: Kernel
    inputs: list[int]  # slot per input, -1 for an omitted one
    outputs: list[np.ndarray | int | None]  # arena view, slot of an external output, or None
    ws: np.ndarray | None
    skip: bool  # a view whose output already is its input's bytes: nothing to do
    attributes: dict[str, Any] = field(default_factory=dict)  # parsed once, at prepare
    # keyword arguments bound into the call: the kernel's prepared constants (`Kernel.constants`),
    # or `weights_kwargs` when prepared weights are off
    constants: dict[str, Any] = field(default_factory=dict)


def prepare_kernels(
    graph: Graph,
    kernels: Mapping[str, Kernel],
    values: list[np.ndarray | None],
    slot: Mapping[str, int],
    fixed: Iterable[str],
    prepared_weights: bool,
) -> tuple[dict[str, dict[str, Any]], int]:
    """Each kernel's prepare hook, once per node (compiled loops are built here, not in a run),
    and its constants hook with the node's true constants, the `fixed` ones: initializers
    neither unbound (shared, bound later) nor planned into the arena (where a run may write
    them), read from `values` by `slot`. With `prepared_weights` off no constants hook is
    called: such kernels are bound with ``prepared_weights=False`` and read their weights as
    stored. Returns the keyword arguments each node's call binds, by node name, and the bytes
    the prepared constants hold."""
    node_constants: dict[str, dict[str, Any]] = {}
    fixed = set(fixed)
    held = PreparedConstants()  # equal arrays held once
    nbytes = 0
    for node in graph.nodes:
        k = kernels[node.name]
        if k.prepare is None and k.constants is None:
            continue
        metas_in, metas_out = node_metas(graph, node)
        try:
            if k.prepare is not None:
                k.prepare(metas_in, metas_out, **node.attributes)
            if k.constants is not None and not prepared_weights:  # weights read as stored: nothing made
                node_constants[node.name] = weights_kwargs(k, prepared_weights)
            elif k.constants is not None:
                inputs = [values[slot[n]] if n in fixed else None for n in node.inputs]
                node_constants[node.name] = held(k.constants(inputs, metas_in, metas_out, **node.attributes))
                nbytes += held.added  # a tiled stage's bands prepare their node's weights once
        except Exception as e:  # a prepare hook failing is a kernel bug: say where
            raise ModelError(f"node {node.name!r} ({node.op_type}): its kernel's prepare failed: {e}") from None
    return node_constants, nbytes


def make_step(
    node: Node,
    kernel: Kernel,
    graph: Graph,
    views: Mapping[str, np.ndarray],
    ws: Mapping[str, np.ndarray],
    slot: Mapping[str, int],
    constants: dict[str, Any],
) -> Step:
    """`node`'s step over the arena `views` and workspaces `ws`; tensors outside the arena are
    read and written through their `slot`."""
    ins = [slot[n] if n else -1 for n in node.inputs]
    outs: list[np.ndarray | int | None] = []
    for n in node.outputs:
        outs.append(None if not n else views[n] if n in views else slot[n])
    skip = False
    if kernel.view and node.outputs and node.outputs[0] in views and node.inputs[0] in views:
        same = address(views[node.inputs[0]]) == address(views[node.outputs[0]])
        skip = same and not any(node.outputs[1:])
    if node.op_type == "Concat" and node.outputs[0] in views:
        kernel, skip = concat_in_place(node, kernel, graph, views, views[node.outputs[0]])
    return Step(node, kernel, ins, outs, ws.get(workspace_id(node)), skip, dict(node.attributes), constants)


def canary_writes(problem: Problem, steps: list[Step]) -> list[list[str]]:
    """The buffers each step writes: its outputs, its workspace and the inputs it overwrites."""
    # An input overwritten in place is written by the step too.
    where = {b.id: r for b, r in zip(problem.buffers, alias_roots(problem), strict=True)}
    return [[*(n for n in s.node.outputs if n), workspace_id(s.node), *_overwritten(s, where)] for s in steps]


def _overwritten(step: Step, where: Mapping[str, tuple[int, int]]) -> list[str]:
    """Inputs the problem declares an output is written over (in place, e.g. an optimizer's
    updates): same alias root and offset. Declared, not measured, so the canary still sees a
    plan that overlaps."""
    outs = {where[o] for o in step.node.outputs if o in where}
    if step.skip or not outs:
        return []
    return [n for n in step.node.inputs if n not in step.node.outputs and where.get(n) in outs]


def after_hooks(steps: list[Step], after_node: Mapping[str, AfterNode], graph: Graph) -> dict[int, AfterNode]:
    """The ``after_node=`` hooks by the index of their node's step; a name that is no node of
    `graph` is refused."""
    index = {s.node.name: i for i, s in enumerate(steps)}
    unknown = [n for n in after_node if n not in index]
    if unknown:
        raise ModelError(f"after_node names {unknown}, which are not nodes of {graph.name!r}")
    return {index[n]: hook for n, hook in after_node.items()}


def copying_hooks(
    steps: list[Step],
    graph: Graph,
    names: Iterable[str],
    values: list[np.ndarray | None],
    slot: Mapping[str, int],
    hooks: Mapping[int, AfterNode],
) -> tuple[dict[int, AfterNode], dict[str, np.ndarray]]:
    """`hooks` plus, right after the step that writes each of `names`, a copy of that tensor
    (read from `values` by `slot`) into the returned dict, before its bytes are reused; the
    hook already at that step runs after the copy. Names no step writes are left out."""
    index = {s.node.name: i for i, s in enumerate(steps)}
    copies: dict[str, np.ndarray] = {}
    hooks = dict(hooks)
    for name in dict.fromkeys(names):
        info = graph.tensors.get(name)
        if info is not None and info.producer in index:
            step = index[info.producer]
            hooks[step] = _copying(name, values, slot[name], copies, hooks.get(step))
    return hooks, copies


def _copying(
    name: str, values: list[np.ndarray | None], slot: int, into: dict[str, np.ndarray], then: AfterNode | None
) -> AfterNode:
    def hook() -> None:
        into[name] = np.array(values[slot], copy=True)
        if then is not None:
            then()

    return hook
