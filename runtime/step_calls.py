"""Each step's kernel call, bound once when a `runtime.Session` prepares: the dispatcher
(`runtime.kernels.bound_call`) gives the call for the step's shapes and attributes (the kernel's
`bind` hook, or its general call), and the output views, workspace and input slots are fixed
here, so that a run only reads the input slots.

Before binding, the workspace the plan gave a step is checked against what its kernel declares
for the step's shapes now (`_check_workspace`): a route whose scratch the plan does not cover
fails here, when the session prepares, naming the node, never inside a run.

A bound call with a `prime` (same arguments as the call) makes what it derives from the step's
arrays (`runtime.kernels.same_arrays`) here, at prepare, so that no run, the first traced one
included, allocates it.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np

from runtime.errors import ExecutionError, ModelError
from runtime.graph import Graph
from runtime.kernels import bound_call

StepCall = Callable[[list[Any]], None]  # one step's kernel call, bound at prepare: reads the slots it is given


def bind_call(step: Any, none_slot: int, graph: Graph, values: list[Any]) -> StepCall:
    """`step`'s call (a session's `runtime.steps.Step`), reading its inputs from `values` by slot (an omitted
    input from `none_slot`, always None). Outputs computed outside the arena are read from
    their slot, which each run fills."""
    if step.skip:
        return _nothing
    k = step.kernel
    metas_in = [graph.tensors[n] if n else None for n in step.node.inputs]
    metas_out = [graph.tensors[n] if n else None for n in step.node.outputs]
    _check_workspace(step, metas_in, metas_out)
    fn, kwargs, prime = bound_call(k, metas_in, metas_out, step.attributes, step.constants, step.node.opset, step.ws)
    slots = [i if i >= 0 else none_slot for i in step.inputs]
    outputs = step.outputs
    if any(isinstance(o, int) for o in outputs):
        multi = k.multi_output

        def external(values: list[Any]) -> None:
            resolved = [values[o] if isinstance(o, int) else o for o in outputs]
            fn(*[values[i] for i in slots], out=tuple(resolved) if multi else resolved[0], **kwargs)

        return external
    out = tuple(outputs) if k.multi_output else outputs[0]
    arrays = [values[i] for i in slots]
    if prime is not None and all(a is None or isinstance(a, np.ndarray) for a in arrays):
        try:
            prime(*arrays, out=out, **kwargs)
        except (ValueError, TypeError, IndexError, ArithmeticError) as e:  # as a run's failure would be told
            node = step.node
            raise ExecutionError(
                f"node {node.name!r} ({node.op_type}) failed: {type(e).__name__}: {e}", node.name
            ) from e
    if len(slots) == 1:
        only = slots[0]
        return lambda values: fn(values[only], out=out, **kwargs)
    if not slots:
        return lambda values: fn(out=out, **kwargs)
    read = itemgetter(*slots)
    return lambda values: fn(*read(values), out=out, **kwargs)


def _nothing(values: list[Any]) -> None:
    """A view whose output already is its input's bytes."""


def _check_workspace(step: Any, metas_in: list[Any], metas_out: list[Any]) -> None:
    """The workspace view the plan gave `step` covers what its kernel's workspace function (for
    Conv, the chosen route's `ConvRoute.bytes`) declares for these shapes and weights options."""
    k = step.kernel
    if k.workspace is None or step.ws is None:
        return
    # `runtime.kernels.weights_kwargs`: the one constant a workspace function also takes
    extra = {"prepared_weights": False} if step.constants.get("prepared_weights") is False else {}
    declared = int(k.workspace(metas_in, metas_out, **step.attributes, **extra))
    if step.ws.nbytes < declared:
        raise ModelError(
            f"node {step.node.name!r} ({step.node.op_type}): the plan gives {step.ws.nbytes:,} bytes of workspace, "
            f"its kernel declares {declared:,} for these shapes; plan the model again with these shapes and options"
        )
