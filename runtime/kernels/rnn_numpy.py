"""The numpy route of LSTM, GRU and RNN (`runtime.kernels.rnn_routes`), and the activations of
the recurrences as the spec names them.

All steps' input projections in one matmul, then per direction a loop with its views made once
(a GRU, or an LSTM without peepholes or coupled gates, where no sequence length ends early and
no clip applies), else one step function per time step: one small matmul and a few ufuncs per
step, with gates, states and scratch in the workspace (`runtime.kernels.rnn_plan.Buffers`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from runtime.kernels.rnn_plan import Buffers

Activation = Callable[[np.ndarray], object]  # applies in place; the result is ignored
Spec = tuple[str, float | None, float | None]  # an activation: lower-case name, alpha, beta

_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
# (alpha, beta) defaults of the activations that take them, as the ONNX ops of the same name.
_PARAMETERS = {
    "leakyrelu": (0.01, None),
    "thresholdedrelu": (1.0, None),
    "elu": (1.0, None),
    "scaledtanh": (1.0, 1.0),
    "hardsigmoid": (0.2, 0.5),
    "affine": (1.0, 0.0),
}


def _sigmoid(x: np.ndarray) -> None:
    # 1 / (1 + e^-x) written through tanh: in place and free of overflow. (It also avoids
    # np.negative, which numpy 2.4 miscomputes on float32 column views such as one gate of a
    # hidden size of 1.)
    # Through ufuncs with scalars of x's dtype: `x *= 0.5` with a Python float costs numpy 2.4
    # several times more on a row of a few hundred elements, and this runs every step.
    half, one = _HALF.get(x.dtype, 0.5), _ONE.get(x.dtype, 1)
    np.multiply(x, half, out=x)
    np.tanh(x, out=x)
    np.add(x, one, out=x)
    np.multiply(x, half, out=x)


_HALF = {np.dtype(t): t(0.5) for t in (np.float16, np.float32, np.float64)}
_ONE = {np.dtype(t): t(1) for t in (np.float16, np.float32, np.float64)}


def _make_activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    key = name.lower()
    if key == "sigmoid":
        return _sigmoid
    if key == "tanh":
        return lambda x: np.tanh(x, out=x)
    if key == "relu":
        return lambda x: np.maximum(x, 0, out=x)
    if key == "leakyrelu":
        slope = 0.01 if alpha is None else alpha  # the spec's default for LeakyRelu
        return lambda x: np.multiply(x, slope, out=x, where=x < 0)
    if key == "thresholdedrelu":
        return lambda x: np.copyto(x, 0, where=x <= alpha)
    if key == "elu":
        return lambda x: np.copyto(x, alpha * np.expm1(np.minimum(x, 0)), where=x < 0)
    if key == "softsign":
        return lambda x: np.divide(x, 1 + np.abs(x), out=x)
    if key == "softplus":
        return lambda x: np.logaddexp(x, 0, out=x)
    if key in ("scaledtanh", "hardsigmoid", "affine"):

        def scaled(x: np.ndarray) -> None:
            if key == "scaledtanh":
                x *= beta
                np.tanh(x, out=x)
                x *= alpha
            else:
                x *= alpha
                x += beta
                if key == "hardsigmoid":
                    np.clip(x, 0, 1, out=x)

        return scaled
    raise ValueError(
        f"RNN activation {name!r} is not one of Sigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu, Elu, "
        "Softsign, Softplus, ScaledTanh, HardSigmoid, Affine"
    )


def activation_specs(op: str, names, alphas, betas, directions: int) -> list[list[Spec]]:
    """(lower-case name, alpha, beta) of each activation, per direction; alphas and betas are
    consumed in order by the activations that take them (as onnxruntime reads the attributes).
    An activation without parameters gets None for both."""
    per_direction = len(_DEFAULT_ACTIVATIONS[op])
    names = list(names) if names else _DEFAULT_ACTIVATIONS[op] * directions
    if len(names) == per_direction and directions == 2:
        names = names * 2
    alphas, betas = list(alphas or []), list(betas or [])
    made = []
    for name in names:
        alpha, beta = _PARAMETERS.get(name.lower(), (None, None))
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        made.append((name.lower(), alpha, beta))
    return [made[d * per_direction : (d + 1) * per_direction] for d in range(directions)]


def _activations(specs: list[list[Spec]]) -> list[list[Activation]]:
    return [[_make_activation(name, alpha, beta) for name, alpha, beta in row] for row in specs]


def run_numpy(
    op: str, x, w, r, b, sequence_lens, initial_h, initial_c, p, out, ws, attrs: dict, specs, w_t=None
) -> None:
    """The recurrence of every direction by numpy: `out` the node's outputs (None where omitted),
    `specs` each direction's activations (`activation_specs`), `w_t` W^T made by the constants hook or None."""
    directions = w.shape[0]
    layout = attrs["layout"]
    seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    hidden = r.shape[2]
    y, y_h = out[0], out[1] if len(out) > 1 else None
    y_c = out[2] if op == "LSTM" and len(out) > 2 else None
    ys = None if y is None else (y if layout == 0 else y.transpose(1, 2, 0, 3))  # (seq, dirs, batch, H)
    if initial_h is not None and layout == 1:
        initial_h = initial_h.transpose(1, 0, 2)
    if initial_c is not None and layout == 1:
        initial_c = initial_c.transpose(1, 0, 2)
    lens = None if sequence_lens is None else np.asarray(sequence_lens)
    if lens is not None and (lens >= seq).all():
        lens = None
    buffers = Buffers(ws, op, seq, batch, hidden, x.dtype, layout)
    reverse = attrs["direction"] == "reverse"
    funcs = _activations(specs)
    for d in range(directions):
        bias = None if b is None else b[d]
        _project(op, x, w[d].T if w_t is None else w_t[d], bias, hidden, attrs, buffers)
        buffers.r_t = r[d].T
        buffers.h[...] = 0 if initial_h is None else initial_h[d]
        buffers.c[...] = 0 if initial_c is None else initial_c[d]
        ys_d = None if ys is None else ys[:, d]
        _numpy_direction(op, buffers, reverse or d == 1, bias, None if p is None else p[d], funcs[d], attrs, lens, ys_d)
        if y_h is not None:
            (y_h[d] if layout == 0 else y_h[:, d])[...] = buffers.h
        if y_c is not None:
            (y_c[d] if layout == 0 else y_c[:, d])[...] = buffers.c


def _numpy_direction(op: str, buffers: Buffers, backwards: bool, bias, p, funcs, attrs: dict, lens, ys) -> None:
    """One direction through numpy: a loop with its views made once when nothing per step
    differs between batch entries, else a step function per time step."""
    seq = buffers.projected.shape[0]
    order = range(seq - 1, -1, -1) if backwards else range(seq)
    plain = lens is None and attrs["clip"] is None
    if op == "GRU" and plain:
        _gru_loop(buffers, order, bias, funcs, attrs["linear_before_reset"], ys)
        return
    if op == "LSTM" and plain and p is None and not attrs["input_forget"]:
        _lstm_loop(buffers, order, funcs, ys)
        return
    for t in order:
        active = None if lens is None else t < lens
        if active is not None and not active.any():
            if ys is not None:
                ys[t] = 0
            continue
        _STEPS[op](buffers, t, bias, p, funcs, attrs, active)
        if ys is not None:
            ys[t] = buffers.h
            if active is not None:
                ys[t][~active] = 0


def _project(op: str, x, w_t, bias, hidden: int, attrs: dict, buf: Buffers) -> None:
    """All steps' input projections X_t W^T (`w_t`: W^T, a view or a contiguous copy) plus the
    biases that do not depend on the state.
    `buf.projected` is a time-major view of a buffer laid out like `x` (either layout)."""
    projected = buf.projected
    width = projected.shape[2]
    flat = projected if attrs["layout"] == 0 else projected.transpose(1, 0, 2)
    np.matmul(x.reshape(-1, x.shape[2]), w_t, out=flat.reshape(-1, width))
    if bias is None:
        return
    # Wb + Rb summed once, then one add over all steps (adding part of it over a strided
    # slice of the projections made numpy buffer all three operands beside the arena).
    total = buf.bias
    np.add(bias[:width], bias[width:], out=total)
    if op == "GRU" and attrs["linear_before_reset"]:
        np.copyto(total[2 * hidden :], bias[2 * hidden : width])  # Rb_h goes inside r * (...)
    projected += total


def _clip(gates: np.ndarray, clip: float | None) -> None:
    if clip is not None:
        np.clip(gates, -clip, clip, out=gates)


def _blend(h: np.ndarray, candidate: np.ndarray, z: np.ndarray, active, tmp: np.ndarray) -> None:
    """H = (1 - z) * candidate + z * H  ==  candidate + z * (H - candidate)."""
    new_h = h if active is None else tmp
    np.subtract(h, candidate, out=new_h)
    new_h *= z
    new_h += candidate
    if active is not None:
        _commit(h, new_h, active)


def _commit(state: np.ndarray, new: np.ndarray, active) -> None:
    """Keep the old state of batch entries past their sequence length."""
    if active is None:
        np.copyto(state, new)
    else:
        np.copyto(state, new, where=active[:, None])


def _lstm_step(buf: Buffers, t, bias, p, funcs, attrs, active) -> None:
    f, g, h = funcs
    hidden = buf.h.shape[1]
    gates = buf.gates
    np.matmul(buf.h, buf.r_t, out=gates)
    gates += buf.projected[t]
    i, o, fg, c = (gates[:, k * hidden : (k + 1) * hidden] for k in range(4))
    if p is None and not attrs["input_forget"]:
        # Without peepholes i, o and f are one contiguous block under one activation: the
        # common case costs three activation calls fewer per step.
        _clip(gates, attrs["clip"])
        f(gates[:, : 3 * hidden])
    else:
        _lstm_gates_in_turn(i, o, fg, c, buf.c, p, f, attrs)
    g(c)
    # New cell f * C + i * c, in place unless sequence_lens may keep the old one (then in tmp).
    new_c = buf.c if active is None else buf.tmp
    np.multiply(fg, buf.c, out=new_c)
    c *= i
    new_c += c
    if active is not None:
        _commit(buf.c, new_c, active)
    if p is not None:
        np.multiply(p[hidden : 2 * hidden], new_c, out=buf.tmp2)
        o += buf.tmp2
        _clip(o, attrs["clip"])
        f(o)
    new_h = buf.h if active is None else buf.tmp2
    np.copyto(new_h, new_c)
    h(new_h)
    new_h *= o
    if active is not None:
        _commit(buf.h, new_h, active)


def _lstm_loop(buf: Buffers, order, funcs, ys) -> None:
    """The LSTM steps of one direction without sequence lengths, clip, peepholes or coupled
    gates: `_lstm_step`'s arithmetic with every view made once, the states updated in place."""
    f, g, act_h = funcs
    hidden = buf.h.shape[1]
    h, cell, gates, r_t, projected = buf.h, buf.c, buf.gates, buf.r_t, buf.projected
    iof = gates[:, : 3 * hidden]
    i, o, fg, c = (gates[:, k * hidden : (k + 1) * hidden] for k in range(4))
    for t in order:
        np.matmul(h, r_t, out=gates)
        np.add(gates, projected[t], out=gates)
        f(iof)
        g(c)
        np.multiply(cell, fg, out=cell)
        np.multiply(c, i, out=c)
        np.add(cell, c, out=cell)
        np.copyto(h, cell)
        act_h(h)
        np.multiply(h, o, out=h)
        if ys is not None:
            np.copyto(ys[t], h)


def _lstm_gates_in_turn(i, o, fg, c, cell, p, f, attrs) -> None:
    """Input and forget gates with peepholes on the old cell and/or coupled (input_forget);
    the output gate waits for its peephole on the new cell when there is one. Clips all
    pre-activations it has, and activates all but the cell candidate `c`."""
    hidden = i.shape[1]
    if p is not None:
        i += p[:hidden] * cell
        fg += p[2 * hidden :] * cell
    for gate in (i, fg, c) if p is not None else (i, o, fg, c):
        _clip(gate, attrs["clip"])
    f(i)
    if attrs["input_forget"]:
        np.subtract(1, i, out=fg)
    else:
        f(fg)
    if p is None:
        f(o)


def _gru_step(buf: Buffers, t, bias, p, funcs, attrs, active) -> None:
    f, g = funcs
    hidden = buf.h.shape[1]
    proj = buf.projected[t]
    zr, candidate = buf.gates[:, : 2 * hidden], buf.gates[:, 2 * hidden :]
    z, reset = zr[:, :hidden], zr[:, hidden:]
    if attrs["linear_before_reset"]:
        # One matmul for the three blocks: the candidate's H Rh^T does not wait for the reset gate.
        hr = buf.hr
        np.matmul(buf.h, buf.r_t, out=hr)
        np.add(hr[:, : 2 * hidden], proj[:, : 2 * hidden], out=zr)
        _clip(zr, attrs["clip"])
        f(zr)
        h_rh = hr[:, 2 * hidden :]
        if bias is not None:
            h_rh += bias[5 * hidden :]
        np.multiply(h_rh, reset, out=candidate)
    else:
        np.matmul(buf.h, buf.r_t[:, : 2 * hidden], out=zr)
        zr += proj[:, : 2 * hidden]
        _clip(zr, attrs["clip"])
        f(zr)
        np.multiply(reset, buf.h, out=buf.tmp)
        np.matmul(buf.tmp, buf.r_t[:, 2 * hidden :], out=candidate)
    candidate += proj[:, 2 * hidden :]
    _clip(candidate, attrs["clip"])
    g(candidate)
    _blend(buf.h, candidate, z, active, buf.tmp2)


def _gru_loop(buf: Buffers, order, bias, funcs, linear_before_reset: int, ys) -> None:
    """The GRU steps of one direction when no sequence length or clip applies: `_gru_step`'s
    arithmetic with every view made once, and the state updated in place. Each step costs a
    dozen ufunc calls on rows of a few hundred elements, where Python's own overhead counts."""
    f, g = funcs
    hidden = buf.h.shape[1]
    h, hr, r_t = buf.h, buf.hr, buf.r_t
    zr, candidate = buf.gates[:, : 2 * hidden], buf.gates[:, 2 * hidden :]
    z, reset = zr[:, :hidden], zr[:, hidden:]
    hr_zr, h_rh = hr[:, : 2 * hidden], hr[:, 2 * hidden :]
    proj_zr, proj_h = buf.projected[..., : 2 * hidden], buf.projected[..., 2 * hidden :]
    r_zr, r_h = r_t[:, : 2 * hidden], r_t[:, 2 * hidden :]
    bias_rh = None if bias is None else bias[5 * hidden :]
    for t in order:
        if linear_before_reset:
            np.matmul(h, r_t, out=hr)
            np.add(hr_zr, proj_zr[t], out=zr)
            f(zr)
            if bias_rh is not None:
                np.add(h_rh, bias_rh, out=h_rh)
            np.multiply(h_rh, reset, out=candidate)
        else:
            np.matmul(h, r_zr, out=zr)
            np.add(zr, proj_zr[t], out=zr)
            f(zr)
            np.multiply(reset, h, out=buf.tmp)
            np.matmul(buf.tmp, r_h, out=candidate)
        np.add(candidate, proj_h[t], out=candidate)
        g(candidate)
        np.subtract(h, candidate, out=h)
        np.multiply(h, z, out=h)
        np.add(h, candidate, out=h)
        if ys is not None:
            np.copyto(ys[t], h)


def _rnn_step(buf: Buffers, t, bias, p, funcs, attrs, active) -> None:
    gates = buf.gates
    np.matmul(buf.h, buf.r_t, out=gates)
    gates += buf.projected[t]
    _clip(gates, attrs["clip"])
    funcs[0](gates)
    _commit(buf.h, gates, active)


_STEPS = {"LSTM": _lstm_step, "GRU": _gru_step, "RNN": _rnn_step}
