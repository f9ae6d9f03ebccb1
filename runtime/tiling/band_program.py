"""A float32 tiled stage run in compiled calls: the session's fast route through a stage's bands.

A stage in one-row stripes is well over a thousand steps of little arithmetic each, and the step
loop adds about as much again per step in Python (docs/BENCHMARKS.md). When a session
prepares, `stage_calls` writes the steps of the tiled stage (the schedule's prefix up to its last
TileRows) as the code of `runtime.kernels.jit_bands`, and gives the session's fast loop one call
for each run of steps it can say, in place of their bound calls. Nothing else changes: the same
graph, plan, arena and views; the steps' own weights (read-only, never copied); a matmul per band
for 1x1 and dense convolutions and the step loop's own compiled loops for depthwise ones.

A step it cannot say (another op, another dtype, a second tensor outside the arena besides the
stage's input, an output over its input other than the step loop's pixel-wise form, copies that
overlap in a way a forward copy would not keep) stays a step of the loop between two calls, and
`Session.stage_note` says how many and why. A step's scratch is the workspace the plan gave it in
the arena (too small for what the call needs: the step loop runs it), else the thread's shared
scratch beside the arena, which the step loop's calls take when the plan gives them none. A run with a canary, an
`after_node` hook or an `on_step` callback takes the step loop (the session's slow path), step by
step; the fast path records a call's time on its first step and none on the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.arena import address
from runtime.errors import ExecutionError
from runtime.graph import Graph
from runtime.kernels import MEMPLAN_DOMAIN, jit_activation, shared_scratch
from runtime.kernels import jit_bands as jb
from runtime.kernels.conv import depthwise
from runtime.kernels.window import spatial_geometry
from runtime.tiling.rows import HEIGHT, copies
from runtime.tiling.rows import OP_TYPE as ROWS

StepCall = Callable[[list[Any]], None]
# False: sessions prepared from now on keep every tiled stage on the step loop (`bench/band_bench.py`
# times both routes of one plan side by side)
COMPILED = True
CONVS = {("", "Conv"), (MEMPLAN_DOMAIN, "ConvAct"), (MEMPLAN_DOMAIN, "PointwiseConvAdd")}


class Refused(Exception):
    """A step the compiled stage cannot say: the reason, for the note."""


def stage_calls(
    graph: Graph, steps: list[Any], calls: list[StepCall], values: list, arena: Any
) -> tuple[list[tuple[int, StepCall]], str]:
    """The session's fast loop as (step index, call) pairs: each run of the tiled stage's steps the
    compiled call can say as one call at its first index, the other steps' bound calls; and what
    was done, or why not."""
    pairs = list(enumerate(calls))
    last = max(
        (i for i, s in enumerate(steps) if (s.node.domain, s.node.op_type) == (MEMPLAN_DOMAIN, ROWS)), default=-1
    )
    if last < 0:
        return pairs, "no tiled stage"
    if jb.RUN is None or not COMPILED:
        return pairs, "the step loop: the compiled loops are off (numba missing, MEMPLAN_JIT=0 or COMPILED)"
    writer = _Writer(graph, values, arena)
    said: dict[int, list[int]] = {}  # the first step of each run of steps said -> the run's code
    loop: list[int] = []  # the stage's steps left to the step loop, and why
    reasons: list[str] = []
    first = -1
    for index, step in enumerate(steps[: last + 1]):
        try:
            code = writer.step(step)
        except Refused as e:
            loop.append(index)
            reasons.append(str(e))
            first = -1
            continue
        if first < 0:
            first = index
            said[first] = []
        said[first].extend(code)
    if not said:
        return pairs, f"the step loop: {reasons[0]}"
    made: list[tuple[int, StepCall]] = [(i, BandProgram(writer, code, steps[i].node.name)) for i, code in said.items()]
    stage = sorted([*made, *((i, calls[i]) for i in loop)], key=lambda pair: pair[0])
    note = f"{last + 1 - len(loop)} of the tiled stage's {last + 1} steps in {len(said)} compiled call(s)"
    if loop:
        note += f"; the step loop for {len(loop)}, the first because {reasons[0]}"
    return [*stage, *pairs[last + 1 :]], note


class BandProgram:
    """The stage's compiled call, as a session's bound call: reads the stage's input from its slot."""

    def __init__(self, writer: _Writer, code: list[int], first: str) -> None:
        assert jb.RUN is not None, "built only with the compiled loops on"
        self.run, self.first = jb.RUN, first
        self.arena = writer.arena[: writer.arena.nbytes // 4 * 4].view(jb.DTYPE)
        self.frozen = _read_only(self.arena)
        self.outer_slot = writer.outer_slot
        self.empty = _read_only(np.zeros(1, jb.DTYPE))
        self.weights = writer.weights
        self.params = np.array(writer.params or [0.0], np.float64)
        self.code = np.array(code, np.int64)
        # scratch beside the arena for steps the plan gave none: the thread's shared scratch, which the
        # step loop's calls take too and a traced run counts (`shared_scratch_held`); none needed, none taken
        self.need, self.scratch = 4 * writer.scratch, np.zeros(1, jb.DTYPE)
        # compiled (or loaded from numba's cache) at prepare, on no record: the arena is not touched
        self.run(self.arena, self.frozen, self.empty, self.weights, self.params, self.code[:0], self.scratch)

    def __call__(self, values: list) -> None:
        outer = self.empty
        if self.outer_slot >= 0:
            outer = _read_only(np.ascontiguousarray(values[self.outer_slot], jb.DTYPE).reshape(-1))
        scratch = shared_scratch(self.need)[: self.need].view(jb.DTYPE) if self.need else self.scratch
        failed = self.run(self.arena, self.frozen, outer, self.weights, self.params, self.code, scratch)
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

    def step(self, step: Any) -> list[int]:
        """The step's records, or Refused (the step loop runs it)."""
        node = step.node
        if step.skip:
            return []
        if any(self.graph.tensors[n].dtype != jb.DTYPE for n in (*node.inputs, *node.outputs) if n):
            raise Refused(f"step {node.name!r} is not float32 throughout")
        if (node.domain, node.op_type) == (MEMPLAN_DOMAIN, ROWS):
            return self.rows(step)
        if (node.domain, node.op_type) in CONVS:
            return self.conv(step)
        if (node.domain, node.op_type) in (("", "Add"), ("", "Relu")):
            return self.elementwise(step)
        if (node.domain, node.op_type) == ("", "MaxPool"):
            return self.max_pool(step)
        raise Refused(f"step {node.name!r} is a {node.op_type}, which the compiled stage has no loop for")

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
        need = (0 if direct else filters * plane) + (channels * kh * kw * plane if kind == jb.DENSE else 0)
        blocks = [plane]  # a pointwise conv's columns a pass: all of them
        if kind == jb.DEPTHWISE:
            blocks = self.depthwise(node.name, x.shape, geo)
            need = int(sum(math.prod(blocks[k : k + 3]) for k in (1, 4, 7)))
        elif kind == jb.POINTWISE and not direct and step.ws is not None and step.ws.nbytes < 4 * need:
            # over its input from its first byte (the step loop's pixel-wise route): a chunk of
            # columns at a time, its input copied out and its result beside it in the scratch
            blocks = [step.ws.nbytes // 4 // (channels + filters)]
            if address(x) != address(y) or blocks[0] < 1:
                raise Refused(f"step {node.name!r} writes over its input other than from its first byte")
            need = blocks[0] * (channels + filters)
        self.params += [p0, p1]
        fields = [*self.where(x), batch, channels, height, width, yo, filters, oh, ow, self.constant(step, 1),
                  self.constant(step, 2) if has_bias else -1, kind, kh, kw, sh, sw, dh, dw, pt, pl, act,
                  len(self.params) - 2, ro, int(direct), *self.scratch_of(step, need)]  # fmt: skip
        fields += blocks
        return [jb.CONV, len(fields) + 2, *fields]

    def depthwise(self, name: str, shape: tuple[int, ...], geo: Any) -> list[int]:
        """The depthwise fields: the step loop's route for these shapes (`depthwise.compiled_layout`:
        sub-planes or channels-last) and its three scratch blocks, each as three dims."""
        if not depthwise.uses_compiled(geo, jb.DTYPE):
            raise Refused(f"step {name!r}: a depthwise conv the compiled loops do not take")
        blocks = [s for s, _ in depthwise.compiled_layout(shape, geo, jb.DTYPE)]
        dims = [d for b in (*blocks, (0,))[:3] for d in (*b, 1, 1)[:3]]
        return [int(depthwise.compiled_channels_last(shape[1], geo)), *dims]

    def output(self, step: Any) -> int:
        """The element offset of the step's one output, a map in the arena."""
        y = step.outputs[0]
        if len(step.outputs) != 1 or not isinstance(y, np.ndarray) or self.where(y)[0]:
            raise Refused(f"step {step.node.name!r} writes other than one map in the arena")
        return self.where(y)[1]

    def elementwise(self, step: Any) -> list[int]:
        """Add of two maps of the output's shape, or Relu: element by element, so the output may be
        either input's memory (the plan's in place)."""
        y = step.outputs[0]
        inputs = [self.array(step, k) for k in range(len(step.node.inputs))]
        if any(a.shape != getattr(y, "shape", None) for a in inputs):
            raise Refused(f"step {step.node.name!r} broadcasts")
        for a in inputs:  # an input partly under the output would be read after it is written
            if np.may_share_memory(a, y) and address(a) != address(y):
                raise Refused(f"step {step.node.name!r} writes partly over an input")
        b = self.where(inputs[1]) if len(inputs) == 2 else (-1, 0)
        fields = [*self.where(inputs[0]), *b, self.output(step), y.size]
        return [jb.ADD, len(fields) + 2, *fields]

    def max_pool(self, step: Any) -> list[int]:
        attrs, x = step.attributes, self.array(step, 0)
        yo = self.output(step)
        y = step.outputs[0]
        if x.ndim != 4 or x.shape[0] != 1 or attrs.get("storage_order", 0):
            raise Refused(f"step {step.node.name!r} is not a 2-D max pool of one image")
        geo = spatial_geometry(x.shape[2:], y.shape[2:], attrs["kernel_shape"], attrs.get("auto_pad", "NOTSET"),
                               attrs.get("pads"), attrs.get("strides"), attrs.get("dilations"))  # fmt: skip
        if geo.dilations != (1, 1):
            raise Refused(f"step {step.node.name!r} is a dilated max pool")
        over = np.may_share_memory(x, y)
        fields = [*self.where(x), *x.shape[1:], yo, *y.shape[2:], *geo.kernel, *geo.strides, *geo.begin, int(over)]
        fields += self.scratch_of(step, y.size if over else 0)
        return [jb.MAXPOOL, len(fields) + 2, *fields]

    def scratch_of(self, step: Any, need: int) -> list[int]:
        """(space, element offset) of `need` float32 values of scratch for `step`: the workspace the
        plan gave the step in the arena, or the call's own beside it (space 2) where it gave none."""
        if step.ws is None:
            self.scratch = max(self.scratch, need)
            return [2, 0]
        if step.ws.nbytes < 4 * need:
            raise Refused(
                f"step {step.node.name!r}: its planned scratch holds {step.ws.nbytes:,} bytes, {4 * need:,} needed"
            )
        return [*self.where(step.ws)] if step.ws.size else [0, 0]
