"""A recurrent node's workspace, and its compiled route worked out once per set of arrays.

The compiled route (float32, `runtime.kernels.jit_rnn`) runs each direction as one BLAS matmul
for all steps' input projections X W^T, then one compiled call for every step, the biases added
inside it. Everything that call takes but the values (views of the workspace, outputs and
weights, activation codes, flags) is a `Plan`; a session's step makes its plan when it
prepares and keeps it while it is given the same arrays (`runtime.kernels.same_arrays`), so
that a run costs the matmuls, the compiled calls and the states' copies: making the plan
(scratch views, the loop's 26 arguments) took about 60 us of Python a call, a GRU of 256 over
100 steps about 1.3 ms in all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.kernels import jit_rnn
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.jit_panels import PANEL
from runtime.kernels.protocol import Bound, GeneralFn
from runtime.kernels.same_arrays import SameArrays

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def workspace(inputs, outputs, *, layout=0, **_) -> int:
    """Bytes of scratch (`Buffers`)."""
    x, w = inputs[0], inputs[1]
    seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    width = w.shape[1]  # gates * hidden
    hidden = inputs[2].shape[2]
    blocks = [((seq, batch, width), x.dtype)] + [((batch, width), x.dtype)] * 2 + [((width,), x.dtype)]
    blocks += [((batch, hidden), x.dtype)] * 4 + [((PANEL,), x.dtype)]  # state, cell, two rows; panel sums
    return scratch_bytes(*blocks)


class Buffers:
    """The workspace of one recurrent node, reused by each direction in turn."""

    def __init__(self, ws, op: str, seq: int, batch: int, hidden: int, dtype, layout: int) -> None:
        scratch = Scratch(ws, op)
        width = GATES[op] * hidden
        # X @ W^T for all steps, in X's own order so that one 2-D matmul (into `flat`) fills it;
        # `projected` is its time-major view.
        if layout == 0:
            self.projected = scratch.take((seq, batch, width), dtype)
            self.flat = self.projected.reshape(-1, width)
        else:
            self.flat = scratch.take((batch, seq, width), dtype).reshape(-1, width)
            self.projected = self.flat.reshape(batch, seq, width).transpose(1, 0, 2)
        # R^T of the current direction (numpy's route): a view, which BLAS reads as fast as a
        # contiguous copy (a transposing copy took a third of a millisecond per direction at 768 x 256).
        self.r_t: np.ndarray = np.empty((0, width), dtype)  # set per direction
        self.gates = scratch.take((batch, width), dtype)
        self.hr = scratch.take((batch, width), dtype)  # H R^T of a GRU, all three blocks at once
        self.bias = scratch.take((width,), dtype)  # the biases added to every step's projection
        self.h = scratch.take((batch, hidden), dtype)
        self.c = scratch.take((batch, hidden), dtype)
        self.tmp = scratch.take((batch, hidden), dtype)
        self.tmp2 = scratch.take((batch, hidden), dtype)
        self.acc = scratch.take((PANEL,), dtype)  # a panel's sums (`runtime.kernels.jit_panels`)


@dataclass(frozen=True)
class Plan:
    """One node's compiled route over one set of arrays: per direction, W^T (a view or the
    constants hook's copy) and the loop's arguments."""

    loop: Callable[..., None]
    buffers: Buffers
    w_t: list[np.ndarray]
    arguments: list[tuple]
    y_h: list[np.ndarray | None]  # each direction's final state views, batch x hidden
    y_c: list[np.ndarray | None]
    layout: int


def plan(op: str, x, w, r, b, lens, initial_h, initial_c, p, out, ws, attrs: dict, specs: list, w_t=None,
         panels=None) -> Plan | None:  # fmt: skip
    """The compiled route's `Plan` for these arrays, or None where numpy's route runs (another
    dtype, batch past `jit_rnn.MAX_BATCH`, compiled loops off). `out` the node's outputs (Y,
    Y_h[, Y_c]; None where omitted), `specs` each direction's activations, `w_t` W^T and
    `panels` R's panels (`jit_panels.pack`) when the constants hook made them."""
    layout = attrs["layout"]
    seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    loop = jit_rnn.loop_for(op, x, r, lens, batch, w, b, initial_h, initial_c, p)
    if loop is None:
        return None
    directions, hidden = w.shape[0], r.shape[2]
    y, y_h = out[0], out[1] if len(out) > 1 else None
    y_c = out[2] if op == "LSTM" and len(out) > 2 else None
    ys = None if y is None else (y if layout == 0 else y.transpose(1, 2, 0, 3))  # (seq, dirs, batch, H)
    buffers = Buffers(ws, op, seq, batch, hidden, x.dtype, layout)
    reverse = attrs["direction"] == "reverse"
    arguments = [
        jit_rnn.arguments(
            op,
            buffers,
            r[d],
            None if panels is None else panels[d],
            None if b is None else b[d],
            None if p is None else p[d],
            None if ys is None else ys[:, d],
            lens,
            reverse or d == 1,
            attrs,
            specs[d],
        )
        for d in range(directions)
    ]
    states = [
        [None if s is None else (s[d] if layout == 0 else s[:, d]) for d in range(directions)] for s in (y_h, y_c)
    ]
    w_ts = [w[d].T if w_t is None else w_t[d] for d in range(directions)]
    return Plan(loop, buffers, w_ts, arguments, states[0], states[1], layout)


def execute(plan: Plan, x: np.ndarray, initial_h, initial_c) -> None:
    """Run `plan` over input `x` and the initial states (None: zeros)."""
    buffers = plan.buffers
    x2d = x.reshape(-1, x.shape[-1])
    for d, arguments in enumerate(plan.arguments):
        np.matmul(x2d, plan.w_t[d], out=buffers.flat)
        for state, initial in ((buffers.h, initial_h), (buffers.c, initial_c)):
            if initial is None:
                state.fill(0)
            else:
                np.copyto(state, initial[d] if plan.layout == 0 else initial[:, d])
        plan.loop(*arguments)
        for final, state in ((plan.y_h[d], buffers.h), (plan.y_c[d], buffers.c)):
            if final is not None:
                np.copyto(final, state)


def bound_recurrence(op: str, general: GeneralFn, attrs: dict, specs: list, outputs: int) -> Bound:
    """The node's call as a session makes it (the kernel's bind hook): its plan made at prepare
    (`prime`) and again only for other arrays; `general` (the kernel's call) where numpy's route runs.
    `attrs` the node's attributes with their defaults, `outputs` how many output slots it has."""

    def make(*arrays: Any) -> Plan | None:
        inputs, out = arrays[: -3 - outputs], arrays[-3 - outputs : -3]
        padded: list[Any] = [*inputs, *(None,) * (8 - len(inputs))]
        x, w, r, b, lens, initial_h, initial_c, p = padded
        return plan(op, x, w, r, b, lens, initial_h, initial_c, p, out, arrays[-3], attrs, specs, *arrays[-2:])

    made = SameArrays(make)
    stand_ins: dict[tuple, np.ndarray] = {}

    def layout_of(array: np.ndarray | None) -> np.ndarray | None:
        """One fixed array (no bytes) per shape and dtype of `array`: x and the initial
        states are read at each run (`execute`), so the plan depends on their shape and
        dtype alone, and a caller's new input of the same shape at each run keeps it."""
        if array is None:
            return None
        key = (array.shape, array.dtype)
        found = stand_ins.get(key)
        if found is None:
            found = stand_ins[key] = np.lib.stride_tricks.as_strided(
                np.zeros(1, array.dtype), array.shape, (0,) * array.ndim
            )
        return found

    def planned(inputs: tuple, out: tuple, ws, w_t, r_panels) -> Plan | None:
        states = [layout_of(a) for a in inputs[5:7]]
        return made(layout_of(inputs[0]), *inputs[1:5], *states, *inputs[7:], *out, ws, w_t, r_panels)

    def bound(*inputs, out, ws=None, w_t=None, r_panels=None, **given):
        todo = planned(inputs, out, ws, w_t, r_panels)
        if todo is None:
            general(inputs, out, ws, {**given, "w_t": w_t, "r_panels": r_panels})
            return
        initial = (*inputs[5:7], None, None)  # initial_h, initial_c
        execute(todo, inputs[0], initial[0], initial[1])

    def prime(*inputs, out, ws=None, w_t=None, r_panels=None, **given):
        if inputs[0] is not None:  # else x is the caller's, bound at run: the plan is made then
            planned(inputs, out, ws, w_t, r_panels)

    return Bound(bound, takes_attributes=True, prime=prime)
