"""A whole model run as one compiled call: the program a `runtime.Session` builds at prepare when
every step of its graph is a compiled integer loop over tensors at fixed places.

The step loop costs a few microseconds of Python per step (a bound call, its arguments, a clock
read), which is more than a small model's whole compute: TensorFlow Lite Micro's hello_world runs
its three FULLY_CONNECTED in under a microsecond. When every step can be said as a call of a
compiled loop on the arena's bytes at fixed offsets and constant parameters, `build_program` writes
the steps as an int64 code (`runtime.kernels.quantized.jit_program`, one interpreter compiled once
per machine, whatever the model; its cold compile time: docs/BENCHMARKS.md, TFLM notes) and
copies what the steps read besides the arena (weights, bias tables, requantization tables and
states) into one private blob; a run is then one call, made straight to the interpreter's compiled
entry (`jit_program.entry`).

What a step becomes is a registry by operator (`ENCODERS`): TFLite's integer FULLY_CONNECTED,
SVDF, QUANTIZE between integer types and 8-bit SOFTMAX; a view step whose output already is its
input (a RESHAPE sharing its input's bytes, as the plans make them) is left out. A step of any
other kind, a tensor outside the arena that is not a constant, or a blob over `MAX_BLOB_BYTES`,
and no program is built: the session keeps its step loop and its ``route_note`` says why. States
(an SVDF's memory, `runtime.states`) move into the blob: the session's state arrays become views
of it, so both routes update the same bytes and `Session.reset_state` resets them for both. The
arithmetic is the kernels' own (SVDF's compiled loop itself; FULLY_CONNECTED's, QUANTIZE's and
SOFTMAX's formulas on the operands' bytes, with the same requantization and exp tables), so both
routes give identical bytes; the tests compare them with each other and with TensorFlow Lite
Micro's interpreter.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime import quant_arith as qa
from runtime.arena import address, aligned_arena
from runtime.errors import ExecutionError
from runtime.graph import Graph
from runtime.kernels.quantized import jit_program as jp
from runtime.kernels.quantized.common import TFLITE, quant
from runtime.kernels.quantized.jit_conv_int import channel_table
from runtime.kernels.quantized.tflite_dense import dense_multipliers
from runtime.kernels.quantized.tflite_softmax import exp_table
from runtime.states import States

MAX_BLOB_BYTES = 1 << 20  # constants copied into a program's blob: small models only, where the loop costs most
ALIGN = 16


class Refused(Exception):
    """A step the program cannot express: the reason, for the session's note."""


@dataclass
class Program:
    """The compiled run of one session: `code` over its arena and `blob`."""

    code: np.ndarray  # int64 records, `jit_program`'s format
    blob: np.ndarray  # uint8: constants, tables and states the steps read
    ops: tuple[str, ...]  # the operator of each record, in order
    build_seconds: float  # writing the code and compiling (or loading from numba's cache) the interpreter
    call: Callable[..., int]  # the interpreter's compiled entry for the arrays' types (`jit_program.entry`)
    copied_bytes: int  # the blob's bytes beyond the states it took over: copies of constants, and tables

    def bound(self, arena: np.ndarray) -> Callable[[], int]:
        """The bare call on `arena`, for callers timing the compute alone (`Session.invoker`)."""
        return functools.partial(self.call, arena, self.blob, self.code)

    def run(self, arena: np.ndarray) -> float:
        """One run; returns its seconds."""
        started = time.perf_counter()
        failed = self.call(arena, self.blob, self.code)
        seconds = time.perf_counter() - started
        if failed:
            raise self.failure(failed)
        return seconds

    def failure(self, failed: int) -> ExecutionError:
        """The error of a call that returned `failed` (not 0): the record it could not run."""
        op = self.ops[failed - 1]
        return ExecutionError(f"the compiled program met an unknown record at {failed - 1} ({op})", op)


class _Builder:
    """Operand places: arena tensors by offset, everything else copied into the blob."""

    def __init__(self, graph: Graph, views: Mapping[str, np.ndarray], values: list, slot: Mapping[str, int],
                 arena: np.ndarray, states: States) -> None:  # fmt: skip
        self.graph, self.views, self.values, self.slot = graph, views, values, slot
        self.base, self.states = address(arena), states
        self.pieces: list[tuple[int, np.ndarray]] = []
        self.placed: dict[str, int] = {}
        self.size = 0

    def add(self, array: np.ndarray) -> int:
        offset = -(-self.size // ALIGN) * ALIGN
        self.pieces.append((offset, np.ascontiguousarray(array)))
        self.size = offset + array.nbytes
        if self.size > MAX_BLOB_BYTES:
            raise Refused(f"its constants pass {MAX_BLOB_BYTES:,} bytes (the program is for small models)")
        return offset

    def where(self, name: str) -> tuple[int, int]:
        """(space, byte offset) of tensor `name`: 0 and its offset in the arena, or 1 and the blob's."""
        if name in self.views:
            return 0, address(self.views[name]) - self.base
        if name not in self.placed:
            value = self.values[self.slot[name]] if name in self.graph.constants else None
            if value is None:
                raise Refused(f"tensor {name!r} is neither in the arena nor a constant")
            self.placed[name] = self.add(value)
        return 1, self.placed[name]

    def blob(self) -> np.ndarray:
        blob = aligned_arena(max(self.size, ALIGN), ALIGN)
        for offset, array in self.pieces:
            blob[offset : offset + array.nbytes] = array.reshape(-1).view(np.uint8)
        return blob

    def move_states(self, blob: np.ndarray) -> int:
        """Each state the steps read becomes a view of the blob, for the step loop too; their bytes."""
        moved = 0
        for name, offset in self.placed.items():
            if name in self.states.arrays:
                old = self.states.arrays[name]
                view = blob[offset : offset + old.nbytes].view(old.dtype).reshape(old.shape)
                self.states.arrays[name] = view
                self.values[self.slot[name]] = view
                moved += view.nbytes
        return moved


def _code(dtype: np.dtype, what: str) -> int:
    code = jp.TYPE_CODES.get(np.dtype(dtype))
    if code is None:
        raise Refused(f"{what} is {dtype}; the program takes {', '.join(map(str, jp.TYPE_CODES))}")
    return code


def _fully_connected(step: Any, b: _Builder) -> list[int]:
    node, attrs, g = step.node, step.attributes, b.graph
    x, w, y = (g.tensors[n] for n in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if not (x.dtype == w.dtype == y.dtype == np.int8):
        raise Refused(f"a FULLY_CONNECTED of {x.dtype} x {w.dtype} -> {y.dtype} (int8 only)")
    bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    if bias_name is not None and bias_name not in g.constants:
        raise Refused("a FULLY_CONNECTED whose bias is computed")
    bias = b.values[b.slot[bias_name]] if bias_name is not None else None
    q_in, q_w = quant(attrs.get("q_inputs"), 0, "input"), quant(attrs.get("q_inputs"), 1, "input")
    q_out = quant(attrs.get("q_outputs"), 0, "output")
    channels, depth = w.shape[0], w.shape[-1]
    multiplier, shift = dense_multipliers(q_in, q_w, q_out, channels)
    lo, hi = qa.activation_range(attrs.get("fused_activation_function", "NONE"), q_out, y.dtype)
    table = channel_table(bias, multiplier, shift, int(q_out.zero_point[0]), lo, hi, channels)
    w_zero = int(q_w.zero_point[0]) if q_w.zero_point.size == 1 else 0
    return [*b.where(node.inputs[0]), int(np.prod(x.shape)) // depth, depth, *b.where(node.inputs[1]), channels,
            1, b.add(table), table.shape[1], *b.where(node.outputs[0]), int(q_in.zero_point[0]), w_zero]  # fmt: skip


def _svdf(step: Any, b: _Builder) -> list[int]:
    node, g = step.node, b.graph
    prepared = step.constants.get("prepared")
    if prepared is None:
        raise Refused("an SVDF without its compiled loop's prepared arguments")
    bias, has_bias, x_zero, feature, state_zero, state_lo, state_hi, output, out_zero, out_lo, out_hi, rank = prepared
    x, wf, wt, state = (g.tensors[node.inputs[i]] for i in (0, 1, 2, 4))
    y = g.tensors[node.outputs[0]]
    if not (x.dtype == wf.dtype == y.dtype == np.int8) or not (
        state.dtype == wt.dtype and wt.dtype in (np.int8, np.int16)
    ):
        raise Refused(
            f"an SVDF of {x.dtype}, weights {wf.dtype}/{wt.dtype}, state {state.dtype} (int8; int8 or int16 time)"
        )
    if np.asarray(bias).dtype != np.int32 or len(x.shape) != 2:
        raise Refused("an SVDF with a bias other than int32 or an input other than (batches, depth)")
    filters, memory = wt.shape
    scales = np.array([feature[0], feature[1], output[0], output[1]], np.int64)
    return [*b.where(node.inputs[0]), x.shape[0], x.shape[1], *b.where(node.inputs[1]), filters,
            *b.where(node.inputs[2]), memory, 1, b.add(np.asarray(bias, np.int32)), y.shape[-1], int(has_bias),
            *b.where(node.inputs[4]), 0 if state.dtype == np.int8 else 2, x_zero, 1, b.add(scales), state_zero,
            state_lo, state_hi, out_zero, out_lo, out_hi, rank, *b.where(node.outputs[0])]  # fmt: skip


def _quantize(step: Any, b: _Builder) -> list[int]:
    node, attrs, g = step.node, step.attributes, b.graph
    x, y = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
    kind_in, kind_out = _code(x.dtype, "a QUANTIZE's input"), _code(y.dtype, "a QUANTIZE's output")
    qi, qo = quant(attrs.get("q_inputs"), 0, "input"), quant(attrs.get("q_outputs"), 0, "output")
    multiplier, shift = qa.quantize_multiplier(float(qi.scale[0]) / float(qo.scale[0]))
    lo, hi = qa.dtype_range(y.dtype)
    return [*b.where(node.inputs[0]), kind_in, *b.where(node.outputs[0]), kind_out, int(np.prod(x.shape)),
            int(qi.zero_point[0]), int(np.asarray(multiplier).reshape(-1)[0]), int(np.asarray(shift).reshape(-1)[0]),
            int(qo.zero_point[0]), lo, hi]  # fmt: skip


def _softmax(step: Any, b: _Builder) -> list[int]:
    node, attrs, g = step.node, step.attributes, b.graph
    x, y = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
    if x.dtype not in (np.int8, np.uint8):
        raise Refused(f"a SOFTMAX of {x.dtype} (8-bit input only)")
    kind_out = _code(y.dtype, "a SOFTMAX's output")
    qi = quant(attrs.get("q_inputs"), 0, "input")
    tables = np.concatenate(
        [np.asarray(t, np.int64) for t in exp_table(float(attrs.get("beta", 1.0)), float(qi.scale[0]))]
    )
    depth = x.shape[-1]
    lo, hi = qa.dtype_range(y.dtype)
    return [*b.where(node.inputs[0]), _code(x.dtype, "its input"), *b.where(node.outputs[0]), kind_out,
            int(np.prod(x.shape)) // depth, depth, b.add(tables), lo, hi, 31 - 8 * y.dtype.itemsize]  # fmt: skip


Encoder = Callable[[Any, _Builder], list[int]]
ENCODERS: dict[str, tuple[int, Encoder]] = {
    "FULLY_CONNECTED": (jp.FULLY_CONNECTED, _fully_connected),
    "SVDF": (jp.SVDF_OP, _svdf),
    "QUANTIZE": (jp.QUANTIZE, _quantize),
    "SOFTMAX": (jp.SOFTMAX, _softmax),
}


def build_program(steps: list[Any], graph: Graph, views: Mapping[str, np.ndarray], values: list, slot: Mapping[str, int],
                  arena: np.ndarray | None, states: States) -> tuple[Program | None, str]:  # fmt: skip
    """The program of a session's `steps` (its `runtime.steps.Step`s, bound at prepare), or None and why not.
    On success the states the steps read are moved into the program's blob (see the module)."""
    if jp.RUN is None:
        return None, "the compiled loops are off (numba missing or MEMPLAN_JIT=0)"
    assert arena is not None, "a session's arena is allocated before its program is built"
    started = time.perf_counter()
    builder = _Builder(graph, views, values, slot, arena, states)
    code: list[int] = []
    ops: list[str] = []
    try:
        for step in steps:
            node = step.node
            if step.skip:
                continue
            found = ENCODERS.get(node.op_type) if node.domain == TFLITE else None
            if found is None:
                raise Refused(f"step {node.name!r} is a {node.op_type}, which the program has no compiled loop for")
            if any(n and n not in views for n in node.outputs):
                raise Refused(f"step {node.name!r} writes a tensor outside the arena")
            opcode, encode = found
            try:
                fields = encode(step, builder)
            except ValueError as e:  # a tensor without quantization: the loop's kernels say it better
                raise Refused(f"step {node.name!r}: {e}") from None
            code += [opcode, len(fields) + 2, *(int(f) for f in fields)]
            ops.append(node.op_type)
    except Refused as e:
        return None, str(e)
    blob = builder.blob()
    code_array = np.array(code, np.int64)
    call = jp.entry(arena, blob, code_array)  # compiled (or loaded from numba's cache) here, not in a run
    moved = builder.move_states(blob)
    seconds = time.perf_counter() - started
    program = Program(code_array, blob, tuple(ops), seconds, call, int(blob.nbytes) - moved)
    return program, f"one compiled call for {len(ops)} steps ({program.build_seconds:.2f} s to build)"
