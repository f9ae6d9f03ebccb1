"""SqueezeExcite(X, W1, B1, W2, B2), memplan's fused squeeze-and-excitation block (made by
the loader, `runtime.fuse_se`; never read from a model file):

    p = GlobalAveragePool(X)          (N, C)
    s = squeeze(W1 p + B1)            (N, Cs), W1 of shape (Cs, C, 1, 1)
    g = gate(W2 s + B2)               (N, C),  W2 of shape (C, Cs, 1, 1)
    Y = X * g                         per channel

`squeeze` is "" (none), Relu, Silu, HardSwish or Clip, `gate` Sigmoid, HardSigmoid or Clip
(`_epilogue.ACTIVATIONS`), each with its parameters as `<squeeze|gate>_<lo|hi|alpha|beta>`.
The vectors live in the workspace. Each batch item's X is read whole (the pool) before its Y
is written, so Y may be X's own memory. In float32 with compiled loops, the whole block is one
compiled call (the pool, both matrix-vector products, the activations and the scaling);
otherwise a few numpy calls per batch item. A session binds the call once per step (`bind`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, Bound, TensorMeta, jit_activation, kernel
from runtime.kernels._epilogue import activation
from runtime.kernels._jit import compiled
from runtime.kernels._scratch import Scratch, same_start, scratch_bytes, small_ufunc_buffers
from runtime.kernels.same_arrays import SameArrays

_PARAMS = ("lo", "hi", "alpha", "beta")
_DEFAULTS = {"lo": -math.inf, "hi": math.inf, "alpha": 0.2, "beta": 0.5}


def _blocks(x: TensorMeta, w1: TensorMeta) -> list[tuple[tuple[int, ...], np.dtype]]:
    """The workspace: pooled vector (C), hidden vector (Cs), gate (C), activation temp."""
    channels, hidden = x.shape[1], w1.shape[0]
    return [((channels,), x.dtype), ((hidden,), x.dtype), ((channels,), x.dtype), ((max(channels, hidden),), x.dtype)]


@functools.lru_cache(maxsize=256)
def _activations(dtype: np.dtype, squeeze: str, gate: str, params: tuple[float, ...]):
    """(squeeze, gate) as `_epilogue` activations and `jit_activation` specs; a clear error for
    an activation the kernel does not take."""
    s_params, g_params = dict(zip(_PARAMS, params[:4], strict=True)), dict(zip(_PARAMS, params[4:], strict=True))
    fns = (activation(squeeze, dtype, **s_params) if squeeze else None, activation(gate, dtype, **g_params))
    specs = (jit_activation.spec(squeeze, **s_params), jit_activation.spec(gate, **g_params))
    return fns, specs


def _params(attrs: dict[str, float]) -> tuple[float, ...]:
    return tuple(float(attrs.get(f"{k}_{p}", _DEFAULTS[p])) for k in ("squeeze", "gate") for p in _PARAMS)


def _workspace(inputs, outputs, *, squeeze: str = "", gate: str = "Sigmoid", **params: float) -> int:
    x, w1 = inputs[0], inputs[1]
    _activations(np.dtype(x.dtype), squeeze, gate, _params(params))  # made at prepare, not in a run
    return scratch_bytes(*_blocks(x, w1))


def _prepare(*_: object, **__: object) -> None:
    warm()


def _numpy_route(x, w1, b1, w2, b2, out, ws, squeeze_fn, gate_fn) -> None:
    scratch = Scratch(ws, "SqueezeExcite")
    pooled, hidden, gated, temp = (scratch.take(shape, dtype) for shape, dtype in _blocks(x, w1))
    n, channels = x.shape[0], x.shape[1]
    plane = math.prod(x.shape[2:])
    w1m, w2m = w1.reshape(w1.shape[0], channels), w2.reshape(channels, w1.shape[0])
    for i in range(n):
        rows = x[i].reshape(channels, plane)
        np.add.reduce(rows, axis=1, out=pooled)
        pooled *= pooled.dtype.type(1.0 / plane)
        np.matmul(w1m, pooled, out=hidden)
        if b1 is not None:
            hidden += b1
        if squeeze_fn is not None:
            squeeze_fn(hidden, temp[: hidden.size])
        np.matmul(w2m, hidden, out=gated)
        if b2 is not None:
            gated += b2
        gate_fn(gated, temp[: gated.size])
        # Element by element, so `out` may be `x`'s own memory.
        np.multiply(rows, gated[:, None], out=out[i].reshape(channels, plane))


def _all_float32(*arrays) -> bool:
    return all(a is None or (a.dtype == jit_activation.DTYPE and a.flags.c_contiguous) for a in arrays)


EMPTY = np.zeros(1, jit_activation.DTYPE)
EMPTY.flags.writeable = False


def _bias(b: np.ndarray | None) -> np.ndarray:
    return EMPTY if b is None else _read_only(b)


def _read_only(a: np.ndarray) -> np.ndarray:
    """`a`, or a read-only view of it: the loop is compiled for read-only inputs (a session's
    tensors and constants are), so that one compilation serves every call."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


# Module globals, which the compiled loop reads as constants.
_NONE, _activate = jit_activation.NONE, jit_activation.activate


def _squeeze_excite(x, w1, b1, has_b1, w2, b2, has_b2, out, in_place, work, inv, c1, p10, p11, c2, p20, p21):  # type: ignore[no-untyped-def]
    """The block for float32 x (N, C, plane), w1 (Cs, C), w2 (C, Cs); `in_place` when out is
    x's memory (the scaling then reads out alone: given two views of one array the compiler
    falls back to scalar code, about 3x slower); `work` holds the pooled vector, the gate and the hidden vector, in that order."""
    n, channels, plane = x.shape
    cs = w1.shape[0]
    pooled, gated, hidden = work[:channels], work[channels : 2 * channels], work[2 * channels : 2 * channels + cs]
    for i in range(n):
        for c in range(channels):
            source = x[i, c]
            total = np.float32(0.0)
            for j in range(plane):
                total += source[j]
            pooled[c] = total * inv
        for k in range(cs):
            acc = b1[k] if has_b1 else np.float32(0.0)
            for c in range(channels):
                acc += w1[k, c] * pooled[c]
            hidden[k] = acc
        if c1 != _NONE:
            _activate(hidden, c1, p10, p11)
        for c in range(channels):
            acc = b2[c] if has_b2 else np.float32(0.0)
            for k in range(cs):
                acc += w2[c, k] * hidden[k]
            gated[c] = acc
        _activate(gated, c2, p20, p21)
        for c in range(channels):
            g = gated[c]
            row = out[i, c]
            if in_place:
                for j in range(plane):
                    row[j] *= g
            else:
                source = x[i, c]
                for j in range(plane):
                    row[j] = source[j] * g


_se = compiled(_squeeze_excite) if _activate is not None else None


def _bind(inputs, outputs, attrs: dict, general) -> Bound | None:
    """The kernel's call for these shapes and attributes (a session's prepare, through `bind`):
    the activations' codes worked out once, and the compiled loop's arguments made once per
    set of arrays (`SameArrays`: a session passes the same ones every run), so that a run is
    one call of the loop (the general call spent 8-11 us a step around it on MobileNetV3-Small)."""
    x, out = inputs[0], outputs[0] if outputs else None
    if _se is None or x is None or out is None or len(x.shape) < 2 or x.dtype != jit_activation.DTYPE:
        return None
    squeeze, gate = attrs.get("squeeze", ""), attrs.get("gate", "Sigmoid")
    _, (s_spec, g_spec) = _activations(np.dtype(x.dtype), squeeze, gate, _params(attrs))
    n, channels = x.shape[0], x.shape[1]
    plane = math.prod(x.shape[2:])
    size = 2 * channels + inputs[1].shape[0]

    def arguments(x, w1, b1, w2, b2, out, ws):
        if ws is None or ws.size < 4 * size or not jit_activation.usable(x, w1, w2, out) or not _all_float32(b1, b2):
            return None
        hidden = w1.shape[0]
        return (
            _read_only(x.reshape(n, channels, plane)), _read_only(w1.reshape(hidden, channels)), _bias(b1),
            b1 is not None, _read_only(w2.reshape(channels, hidden)), _bias(b2), b2 is not None,
            out.reshape(n, channels, plane), same_start(x, out), ws[: 4 * size].view(np.float32),
            np.float32(1.0 / plane), *s_spec, *g_spec,
        )  # fmt: skip

    made = SameArrays(arguments)

    def bound(x, w1, b1, w2, b2, *, out, ws=None, **given):
        args = made(x, w1, b1, w2, b2, out, ws)
        if args is None:
            general((x, w1, b1, w2, b2), out, ws, attrs)
        else:
            _se(*args)

    def prime(x, w1, b1, w2, b2, *, out, ws=None, **given):
        made(x, w1, b1, w2, b2, out, ws)

    # A session calls it without the attributes, and primes it at prepare (`runtime.step_calls`).
    return Bound(bound, prime=prime)


@kernel("SqueezeExcite", domain=MEMPLAN_DOMAIN, workspace=_workspace, inplace=(0,), prepare=_prepare, bind=_bind)
def squeeze_excite(x, w1, b1, w2, b2, *, out, ws, squeeze="", gate="Sigmoid", **params):
    fns, specs = _activations(x.dtype, squeeze, gate, _params(params))
    n, channels = x.shape[0], x.shape[1]
    plane = x.size // (n * channels)
    hidden = w1.shape[0]
    if _se is not None and jit_activation.usable(x, w1, w2, out) and _all_float32(b1, b2):
        # The three vectors as one float32 block, cut in the loop: one view here, not three.
        size = 2 * channels + hidden
        work = np.empty(size, np.float32) if ws is None else ws[: 4 * size].view(np.float32)
        _se(
            _read_only(x.reshape(n, channels, plane)), _read_only(w1.reshape(hidden, channels)), _bias(b1),
            b1 is not None, _read_only(w2.reshape(channels, hidden)), _bias(b2), b2 is not None,
            out.reshape(n, channels, plane), same_start(x, out), work, np.float32(1.0 / plane), *specs[0], *specs[1],
        )  # fmt: skip
        return
    with small_ufunc_buffers():
        _numpy_route(x, w1, b1, w2, b2, out, ws, *fns)


@functools.cache
def warm() -> None:
    """Compile the loop (or load it from numba's cache) on a tiny call, at prepare."""
    if _se is None:
        return
    jit_activation.warm()
    x = np.ones((1, 2, 3), jit_activation.DTYPE)
    w1, w2 = np.ones((1, 2), jit_activation.DTYPE), np.ones((2, 1), jit_activation.DTYPE)
    work = np.zeros(5, jit_activation.DTYPE)
    for b in (EMPTY, _read_only(np.zeros(2, jit_activation.DTYPE))):
        _se(
            _read_only(x), _read_only(w1), b, False, _read_only(w2), b, False, np.empty_like(x), False, work,
            np.float32(1 / 3), jit_activation.RELU, 0.0, 0.0, jit_activation.SIGMOID, 0.0, 0.0,
        )  # fmt: skip
