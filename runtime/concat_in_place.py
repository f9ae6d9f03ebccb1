"""Running a Concat planned in place (`runtime.inplace` plans it): its producers already wrote
some inputs straight into their slices of the output, so only the others are copied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from runtime.arena import address
from runtime.graph import Graph, Node
from runtime.kernels import Kernel


def concat_in_place(
    node: Node, kernel: Kernel, graph: Graph, views: Mapping[str, np.ndarray], out: np.ndarray
) -> tuple[Kernel, bool]:
    """A Concat some of whose inputs already sit in their slice of the output (concat in
    place): a kernel that copies only the others, and whether there is nothing to do."""
    axis = int(node.attributes.get("axis", 0)) % max(out.ndim, 1)
    pending, at = [], 0
    for k, name in enumerate(node.inputs):
        width = graph.tensors[name].shape[axis]
        index = (slice(None),) * axis + (slice(at, at + width),)
        at += width
        x = views.get(name)
        if x is None or not x.size or address(x) != address(out[index]):
            pending.append((k, index))
    if len(pending) == len(node.inputs):
        return kernel, False

    def copy_the_rest(*inputs: np.ndarray, out: np.ndarray, **_: Any) -> None:
        for k, index in pending:
            out[index] = inputs[k]

    return Kernel(node.op_type, copy_the_rest), not pending
