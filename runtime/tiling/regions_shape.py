"""Region functions of ops that move a map's axes without touching its rows (ONNX's Reshape and
Transpose): a ShuffleNet channel shuffle (Reshape to 5-D, Transpose of the channel groups,
Reshape back) keeps every row where it was, so a band of rows passes through unchanged.

Each declares `moves`, where each input axis goes in the output; an axis a Reshape merges or
splits goes nowhere (-1), and a chain whose rows sit on such an axis ends there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from runtime.tiling.regions import Region, region


def _reshape_moves(graph: Any, node: Any) -> tuple[int, ...] | None:
    """Input axis i stays output axis j when the axes before it hold as many elements on both
    sides and it keeps its length: then C order puts each of its rows in the same place."""
    if not node.inputs or node.inputs[0] not in graph.tensors or node.outputs[0] not in graph.tensors:
        return None
    shape, out = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    moves = []
    for i, size in enumerate(shape):
        before = math.prod(shape[:i])
        kept = [j for j in range(len(out)) if out[j] == size and math.prod(out[:j]) == before]
        moves.append(kept[0] if kept else -1)
    return tuple(moves)


def _transpose_moves(graph: Any, node: Any) -> tuple[int, ...] | None:
    """Output axis j is input axis perm[j] (perm: reversed axes when not given)."""
    rank = len(graph.tensors[node.inputs[0]].shape)
    perm = [int(p) for p in node.attributes.get("perm") or range(rank - 1, -1, -1)]
    if sorted(perm) != list(range(rank)):
        return None
    return tuple(perm.index(axis) for axis in range(rank))


@region("Reshape", moves=_reshape_moves)
@region("Transpose", moves=_transpose_moves)
def kept_rows(
    attrs: Mapping[str, Any], shape: tuple[int, ...], out_shape: tuple[int, ...], y0: int, y1: int
) -> Region | None:
    """Output rows [y0, y1) are input rows [y0, y1) (the stage checks the axis is kept, `moves`)."""
    if len(shape) not in (4, 5) or len(out_shape) not in (4, 5):
        return None
    return Region(y0, y1, {})
