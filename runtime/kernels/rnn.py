"""LSTM, GRU and RNN: the kernels around the recurrences' route table.

A node's route is one value of `runtime.kernels.rnn_routes.ROUTES` ("compiled": each direction's
recurrence as one compiled call, `runtime.kernels.jit_rnn`, its plan made once per set of arrays
in a session, `runtime.kernels.rnn_plan`; "numpy": `runtime.kernels.rnn_numpy`), picked once per
shape and dtypes (`RecurrenceCase.chosen`): the workspace function, the prepare hook, the call and
the bound call all read that one route object. Both routes take all steps' input projections in
one matmul, with gates, states and scratch in the workspace.

Shared conventions (ONNX's): gate blocks are stacked in W and R in the spec's order
(LSTM i, o, f, c; GRU z, r, h; RNN one block); directions are forward, reverse or
bidirectional (two weight sets); layout 0 is time-major, layout 1 batch-major; steps at or
beyond a batch entry's `sequence_lens` leave its state untouched and write zeros to Y, so
the final state outputs hold each entry's last valid step (reverse runs start from there).
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import jit_panels, kernel
from runtime.kernels._scratch import small_ufunc_buffers
from runtime.kernels.protocol import Bound
from runtime.kernels.rnn_numpy import activation_specs
from runtime.kernels.rnn_routes import RecurrenceCase


def rnn_workspace(inputs, outputs, *, layout=0, **_) -> int:
    """The workspace of the node's route (`RecurrenceRoute.workspace`)."""
    return RecurrenceCase.of(_op_of(inputs), inputs, layout).chosen.workspace(inputs, outputs, layout=layout)


def _op_of(inputs) -> str:
    """LSTM, GRU or RNN, by the number of gate blocks W stacks per hidden unit."""
    return {4: "LSTM", 3: "GRU", 1: "RNN"}[inputs[1].shape[1] // inputs[2].shape[2]]


def rnn_prepare(inputs, outputs, *, layout=0, **_) -> None:
    """Its route's prepare (the compiled route's loop compiled for its one signature), if any."""
    case = RecurrenceCase.of(_op_of(inputs), inputs, layout)
    route = case.chosen
    if route.prepare is not None:
        route.prepare(case)


def rnn_constants(values, inputs, outputs, *, layout=0, **_) -> dict:
    """The kernels' constants hook (`runtime.kernels.Kernel.constants`): a constant W kept
    transposed and contiguous (``w_t``, directions x input x gates), which BLAS multiplies
    faster than W's transposed view (80 x 512 by 512 x 1024: about 1.0 ms against 1.14 at one
    thread), and a constant float32 R as the panels the compiled loops stream (``r_panels``,
    `runtime.kernels.jit_panels`: a GRU of 256's step 9.5 -> 7.5 us). A shared or trained
    weight has no value here: W keeps its view, the loops read R's rows; so do constant ones
    when `MemoryOptions.prepared_weights` is off (the hook is not called, and the kernels'
    ``prepared_weights=False`` asks for nothing else: they make no copy of W or R per call)."""
    w = values[1] if len(values) > 1 else None
    r = values[2] if len(values) > 2 else None
    made = {}
    if w is not None and w.ndim == 3 and w.dtype in (np.float32, np.float64):
        made["w_t"] = np.ascontiguousarray(w.transpose(0, 2, 1))
    if r is not None and r.ndim == 3 and RecurrenceCase.of(_op_of(inputs), inputs, layout).chosen.compiled:
        made["r_panels"] = jit_panels.pack(r)
    return made


@small_ufunc_buffers()  # the biases broadcast over all steps' projections
def _run(op: str, x, w, r, b, sequence_lens, initial_h, initial_c, p, out, ws, attrs, w_t=None, r_panels=None):
    directions = w.shape[0]
    specs = activation_specs(op, attrs["activations"], attrs["activation_alpha"], attrs["activation_beta"], directions)
    route = RecurrenceCase.of(op, (x, w, r, b, sequence_lens, initial_h, initial_c, p), attrs["layout"]).chosen
    route.run(op, x, w, r, b, sequence_lens, initial_h, initial_c, p, out, ws, attrs, specs, w_t, r_panels)


# The attributes `_run` reads, with the spec's defaults (a session's node lists only those it sets).
_DEFAULTS = dict(
    activations=None, activation_alpha=None, activation_beta=None, clip=None, direction="forward", input_forget=0,
    layout=0, linear_before_reset=0,
)  # fmt: skip


def _binder(op: str):
    """The bind hook of `op`'s kernel: its route's bound call (the compiled route's plan made once
    per set of arrays), or None where the route has none (the general call runs)."""

    def bind(inputs, outputs, attributes: dict, general) -> Bound | None:
        attrs = {k: attributes.get(k, v) for k, v in _DEFAULTS.items()}
        route = RecurrenceCase.of(op, inputs, attributes.get("layout", 0)).chosen
        if route.bind is None:
            return None
        directions = inputs[1].shape[0]
        specs = activation_specs(op, attrs["activations"], attrs["activation_alpha"], attrs["activation_beta"],
                                 directions)  # fmt: skip
        return route.bind(op, general, attrs, specs, len(outputs))

    return bind


@kernel(
    "LSTM",
    workspace=rnn_workspace,
    outputs="many",
    prepare=rnn_prepare,
    constants=rnn_constants,
    bind=_binder("LSTM"),
)
def lstm(
    x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *, out, ws,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, input_forget=0, layout=0, w_t=None, r_panels=None, prepared_weights=True,
):  # fmt: skip
    attrs = dict(
        activations=activations, activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        direction=direction, input_forget=input_forget, layout=layout, linear_before_reset=0,
    )  # fmt: skip
    _run("LSTM", x, w, r, b, sequence_lens, initial_h, initial_c, p, out, ws, attrs, w_t=w_t, r_panels=r_panels)


@kernel(
    "GRU",
    workspace=rnn_workspace,
    outputs="many",
    prepare=rnn_prepare,
    constants=rnn_constants,
    bind=_binder("GRU"),
)
def gru(
    x, w, r, b=None, sequence_lens=None, initial_h=None, *, out, ws, activation_alpha=None,
    activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, layout=0,
    linear_before_reset=0, w_t=None, r_panels=None, prepared_weights=True,
):  # fmt: skip
    attrs = dict(
        activations=activations, activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        direction=direction, input_forget=0, layout=layout, linear_before_reset=linear_before_reset,
    )  # fmt: skip
    _run("GRU", x, w, r, b, sequence_lens, initial_h, None, None, out, ws, attrs, w_t=w_t, r_panels=r_panels)


@kernel(
    "RNN",
    workspace=rnn_workspace,
    outputs="many",
    prepare=rnn_prepare,
    constants=rnn_constants,
    bind=_binder("RNN"),
)
def rnn(
    x, w, r, b=None, sequence_lens=None, initial_h=None, *, out, ws, activation_alpha=None,
    activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, layout=0, w_t=None,
    r_panels=None, prepared_weights=True,
):  # fmt: skip
    attrs = dict(
        activations=activations, activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
        direction=direction, input_forget=0, layout=layout, linear_before_reset=0,
    )  # fmt: skip
    _run("RNN", x, w, r, b, sequence_lens, initial_h, None, None, out, ws, attrs, w_t=w_t, r_panels=r_panels)
