"""A float32 tiled stage run as one compiled call: the session's fast route through a stage's bands.

A stage of MobileNetV2-224's head in one-row stripes is about 1,200 steps of a few microseconds of
arithmetic each; the step loop adds as much again per step in Python. When a session prepares,
`stage_calls` writes the steps of the tiled stage (the schedule's prefix up to its last TileRows)
as the code of `runtime.kernels.jit_bands` and gives the session's fast loop one call for them all,
in place of their bound calls. Nothing else changes: the same graph, plan, arena and views; the
steps' own weights (read-only, never copied); the convolutions' arithmetic in the same order of
sums per output (a matmul per band for 1x1 and dense convolutions, its depthwise taps in order)
and the step loop's compiled epilogues.

A step it cannot say (another op, another dtype, a tensor outside the arena besides the stage's
input, copies that overlap in a way a forward copy would not keep) leaves the stage to the step
loop, and the note says why. Where the plan gives the stage's steps scratch in the arena
(``workspace``) the step loop keeps the stage too: the compiled call's scratch is beside the arena,
as the step loop's shared scratch is when the options leave kernels' scratch outside. A run with a canary, an `after_node`
hook or an `on_step` callback takes the step loop (the session's slow path), step by step; the
fast path records the stage's time on its first step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.arena import address
from runtime.errors import ExecutionError
from runtime.graph import Graph
from runtime.kernels import MEMPLAN_DOMAIN, jit_activation
from runtime.kernels import jit_bands as jb
from runtime.kernels.conv import depthwise
from runtime.kernels.window import spatial_geometry
from runtime.tiling.rows import HEIGHT, copies
from runtime.tiling.rows import OP_TYPE as ROWS

StepCall = Callable[[list[Any]], None]
CONVS = {("", "Conv"), (MEMPLAN_DOMAIN, "ConvAct"), (MEMPLAN_DOMAIN, "PointwiseConvAdd")}


class Refused(Exception):
    """A step the compiled stage cannot say: the reason, for the note."""


def stage_calls(
    graph: Graph, steps: list[Any], calls: list[StepCall], values: list, arena: Any
) -> tuple[list[tuple[int, StepCall]], str]:
    """The session's fast loop as (step index, call) pairs: the tiled stage's steps as one compiled
    call at its first index, the other steps' bound calls; and what was done, or why not."""
    pairs = list(enumerate(calls))
    last = max(
        (i for i, s in enumerate(steps) if (s.node.domain, s.node.op_type) == (MEMPLAN_DOMAIN, ROWS)), default=-1
    )
    if last < 0:
        return pairs, "no tiled stage"
    if jb.RUN is None:
        return pairs, "the step loop: the compiled loops are off (numba missing or MEMPLAN_JIT=0)"
    if any(s.ws is not None for s in steps[: last + 1]):
        return pairs, "the step loop: kernels' scratch is planned in the arena (workspace)"
    try:
        stage = _Writer(graph, values, arena).stage(steps[: last + 1])
    except Refused as e:
        return pairs, f"the step loop: {e}"
    return [(0, stage), *pairs[last + 1 :]], f"one compiled call for the tiled stage's {last + 1} steps"


class BandProgram:
    """The stage's compiled call, as a session's bound call: reads the stage's input from its slot."""

    def __init__(self, writer: _Writer, code: list[int], scratch: int, first: str) -> None:
        assert jb.RUN is not None, "built only with the compiled loops on"
        self.run, self.first = jb.RUN, first
        self.arena = writer.arena[: writer.arena.nbytes // 4 * 4].view(jb.DTYPE)
        self.frozen = _read_only(self.arena)
        self.outer_slot = writer.outer_slot
        self.empty = _read_only(np.zeros(1, jb.DTYPE))
        self.weights = writer.weights
        self.params = np.array(writer.params or [0.0], np.float64)
        self.code = np.array(code, np.int64)
        self.scratch = np.empty(max(scratch, 1), jb.DTYPE)
        # compiled (or loaded from numba's cache) at prepare, on no record: the arena is not touched
        self.run(self.arena, self.frozen, self.empty, self.weights, self.params, self.code[:0], self.scratch)

    def __call__(self, values: list) -> None:
        outer = self.empty
        if self.outer_slot >= 0:
            outer = _read_only(np.ascontiguousarray(values[self.outer_slot], jb.DTYPE).reshape(-1))
        failed = self.run(self.arena, self.frozen, outer, self.weights, self.params, self.code, self.scratch)
        if failed:
            raise ExecutionError(f"the compiled tiled stage met an unknown record at {failed - 1}", self.first)


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


class _Writer:
    def __init__(self, graph: Graph, values: list, arena: np.ndarray) -> None:
        self.graph, self.values, self.arena = graph, values, arena
        self.base, self.end = address(arena), address(arena) + arena.nbytes
        self.outer: str | None = None  # the one tensor read from outside the arena: the stage's input
        self.outer_slot, self.outer_array = -1, np.zeros(0, jb.DTYPE)
        from numba import typed, types

        self.weights = typed.List.empty_list(types.Array(types.float32, 1, "C", readonly=True))
        self.weight_index: dict[str, int] = {}
        self.params: list[float] = []
        self.scratch = 0

    def stage(self, steps: list[Any]) -> BandProgram:
        code: list[int] = []
        for step in steps:
            if step.skip:
                continue
            node = step.node
            if any(self.graph.tensors[n].dtype != jb.DTYPE for n in (*node.inputs, *node.outputs) if n):
                raise Refused(f"step {node.name!r} is not float32 throughout")
            if (node.domain, node.op_type) == (MEMPLAN_DOMAIN, ROWS):
                code += self.rows(step)
            elif (node.domain, node.op_type) in CONVS:
                code += self.conv(step)
            else:
                raise Refused(f"step {node.name!r} is a {node.op_type}, which the compiled stage has no loop for")
        return BandProgram(self, code, self.scratch, steps[0].node.name)

    def array(self, step: Any, k: int) -> np.ndarray:
        """Input `k` of `step` as the step loop reads it (the stage's input: an array of its shape)."""
        name = step.node.inputs[k]
        value = self.values[step.inputs[k]]
        if name in self.graph.constants:
            raise Refused(f"step {step.node.name!r} reads constant {name!r} as a map")
        if value is None or not self.base <= address(value) < self.end:
            if self.outer not in (None, name):
                raise Refused(f"tensors {self.outer!r} and {name!r} both lie outside the arena")
            info = self.graph.tensors[name]
            if self.outer is None:
                self.outer, self.outer_slot = name, step.inputs[k]
                self.outer_array = np.zeros(info.shape, jb.DTYPE)
            return self.outer_array
        return value

    def where(self, view: np.ndarray) -> tuple[int, int]:
        """(space, element offset) of a view of the arena or of the stage's input."""
        at = address(view)
        for space, start, size in (
            (0, self.base, self.arena.nbytes),
            (1, address(self.outer_array), self.outer_array.nbytes),
        ):
            if start <= at < start + max(size, 1):
                if (at - start) % 4:
                    raise Refused("a tile not on a float32 boundary")
                return space, (at - start) // 4
        raise Refused("a tile outside the arena")

    def block(self, view: np.ndarray) -> list[int]:
        dims = (1,) * (4 - view.ndim) + view.shape
        strides = (0,) * (4 - view.ndim) + tuple(s // 4 for s in view.strides)
        if view.ndim > 4 or any(s % 4 for s in view.strides):
            raise Refused("a block of more than 4 axes")
        return [*dims, *strides]

    def rows(self, step: Any) -> list[int]:
        attrs = step.attributes
        sources = tuple(self.array(step, k) for k in range(len(step.node.inputs)))
        out = step.outputs[0]
        if not isinstance(out, np.ndarray):
            raise Refused(f"step {step.node.name!r} writes outside the arena")
        zeros, pairs = copies(sources, out, list(attrs["starts"]), int(attrs.get("first", 0)),
                              tuple(attrs.get("columns", (0, 0))), int(attrs.get("axis", HEIGHT)))  # fmt: skip
        code: list[int] = []
        for view in zeros:
            code += [jb.ZERO, 12, *self.where(view), *self.block(view)]
        for target, source in pairs:
            if np.may_share_memory(target, source) and (
                target.strides != source.strides or address(target) > address(source)
            ):
                raise Refused(f"step {step.node.name!r} copies rows over their own source")
            src_block = self.block(source)
            code += [jb.COPY, 18, *self.where(target), *self.block(target), *src_block[4:], *self.where(source)]
        return code

    def constant(self, step: Any, k: int) -> int:
        """Index of input `k` of `step` (a constant: weights, bias) among the program's weights."""
        name = step.node.inputs[k]
        if name not in self.graph.constants or self.values[step.inputs[k]] is None:
            raise Refused(f"weights {name!r} are computed or not bound")
        if name not in self.weight_index:
            value = _read_only(np.ascontiguousarray(self.values[step.inputs[k]], jb.DTYPE).reshape(-1))
            self.weight_index[name] = len(self.weights)
            self.weights.append(value)
        return self.weight_index[name]

    def conv(self, step: Any) -> list[int]:
        node, attrs = step.node, step.attributes
        x, y = self.array(step, 0), step.outputs[0]
        w = self.graph.tensors[node.inputs[1]]
        if not isinstance(y, np.ndarray) or x.ndim != 4 or len(w.shape) != 4:
            raise Refused(f"step {node.name!r} is not a 2-D convolution of maps in the arena")
        batch, channels, height, width = x.shape
        filters, oh, ow = y.shape[1], y.shape[2], y.shape[3]
        group = int(attrs.get("group", 1))
        geo = spatial_geometry((height, width), (oh, ow), attrs.get("kernel_shape") or w.shape[2:],
                               attrs.get("auto_pad", "NOTSET"), attrs.get("pads"), attrs.get("strides"),
                               attrs.get("dilations"))  # fmt: skip
        (kh, kw), (sh, sw), (dh, dw), (pt, pl) = geo.kernel, geo.strides, geo.dilations, geo.begin
        if group == 1 and (kh, kw, sh, sw, pt, pl) == (1, 1, 1, 1, 0, 0) and (oh, ow) == (height, width):
            kind = jb.POINTWISE
        elif group == channels == filters and w.shape[1] == 1 and batch == 1:
            kind = jb.DEPTHWISE
        elif group == 1:
            kind = jb.DENSE
        else:
            raise Refused(f"step {node.name!r} is a grouped convolution")
        has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
        residual = self.array(step, 3) if node.op_type == "PointwiseConvAdd" else None
        name = attrs.get("activation", "Relu" if node.op_type == "ConvAct" else "")
        if name and name not in jit_activation.CODES:
            raise Refused(f"step {node.name!r} has activation {name!r}")
        act, p0, p1 = jit_activation.spec(
            name, **{k: float(attrs[k]) for k in ("lo", "hi", "alpha", "beta") if k in attrs}
        )
        # contiguous maps: overlapping bounds are shared bytes
        direct = not np.may_share_memory(x, y) and (residual is None or not np.may_share_memory(residual, y))
        ro = -1
        if residual is not None:
            space, ro = self.where(residual)
            if space or (np.may_share_memory(residual, y) and address(residual) != address(y)):
                raise Refused(f"step {node.name!r} adds a residual partly over its output")
        space, yo = self.where(y)
        if space:
            raise Refused(f"step {node.name!r} writes outside the arena")
        plane = oh * ow  # scratch: the result (unless direct), then a dense conv's columns
        self.scratch = max(self.scratch, filters * plane + (channels * kh * kw * plane if kind == jb.DENSE else 0))
        self.params += [p0, p1]
        fields = [*self.where(x), batch, channels, height, width, yo, filters, oh, ow, self.constant(step, 1),
                  self.constant(step, 2) if has_bias else -1, kind, kh, kw, sh, sw, dh, dw, pt, pl, act,
                  len(self.params) - 2, ro, int(direct)]  # fmt: skip
        if kind == jb.DEPTHWISE:
            fields += self.depthwise(node.name, x.shape, geo)
        return [jb.CONV, len(fields) + 2, *fields]

    def depthwise(self, name: str, shape: tuple[int, ...], geo: Any) -> list[int]:
        """The depthwise fields: the step loop's route for these shapes (`depthwise.compiled_layout`:
        sub-planes or channels-last) and its three scratch blocks, each as three dims."""
        if not depthwise.uses_compiled(geo, jb.DTYPE):
            raise Refused(f"step {name!r}: a depthwise conv the compiled loops do not take")
        blocks = [s for s, _ in depthwise.compiled_layout(shape, geo, jb.DTYPE)]
        dims = [d for b in (*blocks, (0,))[:3] for d in (*b, 1, 1)[:3]]
        self.scratch = max(self.scratch, sum(math.prod(b) for b in blocks))
        return [int(depthwise.compiled_channels_last(shape[1], geo)), *dims]
