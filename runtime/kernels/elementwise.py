"""Arithmetic: broadcasting binary ops, variadic Sum/Max/Min, and unary math functions.

Broadcasting is numpy's multidirectional rule, which ONNX uses too; shape inference at load
has already given `out` the broadcast shape. Every kernel here is safe when `out` shares its
memory with an input (the planner's in-place reuse): single ufunc calls are, and the
multi-step ones go through `apply_blocks` or `readable`.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import Bound, kernel
from runtime.kernels._blocks import apply_blocks, erf, readable, same_memory
from runtime.kernels._chunks import chunks_workspace, run_chunks
from runtime.kernels._scratch import ufunc_into


def _is_int(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.integer)


def _same_shapes(ufunc):
    """A bind hook: where no operand is broadcast, the step's call is the ufunc itself (what
    `ufunc_into` would call), without the kernel's two Python frames around it."""

    def bind(inputs, outputs, attrs, general) -> Bound | None:
        out = outputs[0] if outputs else None
        if out is None or any(x is None or tuple(x.shape) != tuple(out.shape) for x in inputs):
            return None
        return Bound(ufunc)

    return bind


@kernel("Add", inplace=(0, 1), bind=_same_shapes(np.add))
def add(a, b, *, out):
    ufunc_into(np.add, a, b, out=out)


@kernel("Sub", inplace=(0, 1), bind=_same_shapes(np.subtract))
def sub(a, b, *, out):
    ufunc_into(np.subtract, a, b, out=out)


@kernel("Mul", inplace=(0, 1), bind=_same_shapes(np.multiply))
def mul(a, b, *, out):
    ufunc_into(np.multiply, a, b, out=out)


def _trunc_div(a, b, out):
    # C-style division: a - fmod(a, b) is an exact multiple of b, so flooring it is exact.
    np.fmod(a, b, out=out)
    np.subtract(a, out, out=out)
    np.floor_divide(out, b, out=out)


@kernel("Div", inplace=(0, 1))
def div(a, b, *, out):
    """Integer division truncates toward zero (as in C), not toward -inf as numpy's `//`."""
    if not _is_int(out):
        with np.errstate(divide="ignore", invalid="ignore"):
            ufunc_into(np.divide, a, b, out=out)
    elif np.issubdtype(out.dtype, np.unsignedinteger):
        np.floor_divide(a, b, out=out)
    else:
        apply_blocks(_trunc_div, out, a, b)


@kernel("Pow", inplace=(0, 1))
def pow_(a, b, *, out):
    """The result has the base's type; the exponent may be of another numeric type."""
    with np.errstate(all="ignore"):
        if _is_int(a) and _is_int(b) and (b < 0).any():
            # numpy refuses negative integer exponents: compute in float64 and truncate,
            # as a C runtime would.
            np.copyto(out, np.power(a.astype(np.float64), b), casting="unsafe")
        else:
            ufunc_into(np.power, a, b, out=out, casting="unsafe")


@kernel("Mod", inplace=(0, 1))
def mod(a, b, *, out, fmod=0):
    """fmod=0: the remainder takes the divisor's sign (Python's %); fmod=1: the dividend's (C's fmod)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if fmod:
            ufunc_into(np.fmod, a, b, out=out)
        else:
            ufunc_into(np.mod, a, b, out=out)


def _fold(ufunc, inputs, out):
    """out = ufunc(...ufunc(inputs[0], inputs[1])..., inputs[-1]) with broadcasting.

    The first call reads inputs 0 and 1 as it writes, so either may be `out` itself (the
    planner's in-place case) without a copy; any other overlap is copied first.
    """
    inputs = [x if i < 2 and same_memory(x, out) else readable(x, out) for i, x in enumerate(inputs)]
    if len(inputs) == 1:
        np.copyto(out, inputs[0])
        return
    ufunc_into(ufunc, inputs[0], inputs[1], out=out)
    for x in inputs[2:]:
        ufunc_into(ufunc, out, x, out=out)


@kernel("Sum", inplace=(0, 1))
def sum_(*inputs, out):
    _fold(np.add, inputs, out)


@kernel("Max", inplace=(0, 1))
def max_(*inputs, out):
    _fold(np.maximum, inputs, out)


@kernel("Min", inplace=(0, 1))
def min_(*inputs, out):
    _fold(np.minimum, inputs, out)


def _unary(op_type, ufunc, errors=None):
    """Register the ONNX op `op_type` as one numpy ufunc written into `out`."""

    def run(x, *, out):
        if errors is None:
            ufunc(x, out=out)
        else:
            with np.errstate(**{e: "ignore" for e in errors}):
                ufunc(x, out=out)

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type}: numpy's {ufunc.__name__}."
    kernel(op_type, inplace=(0,), bind=_same_shapes(ufunc) if errors is None else None)(run)


_unary("Neg", np.negative)
_unary("Abs", np.absolute)
_unary("Sqrt", np.sqrt, ("invalid",))
_unary("Reciprocal", np.reciprocal, ("divide",))
_unary("Exp", np.exp, ("over",))
_unary("Log", np.log, ("divide", "invalid"))
_unary("Floor", np.floor)
_unary("Ceil", np.ceil)
# numpy rounds halves to even, which is what ONNX Round specifies.
_unary("Round", np.round)
_unary("Sign", np.sign)
_unary("Sin", np.sin)
_unary("Cos", np.cos)
_unary("Tan", np.tan)
_unary("Asin", np.arcsin, ("invalid",))
_unary("Acos", np.arccos, ("invalid",))
_unary("Atan", np.arctan)
_unary("Sinh", np.sinh, ("over",))
_unary("Cosh", np.cosh, ("over",))
_unary("Asinh", np.arcsinh)
_unary("Acosh", np.arccosh, ("invalid",))
_unary("Atanh", np.arctanh, ("divide", "invalid"))


# Erf, chunk by chunk in the workspace. |x| >= 0.5: Abramowitz & Stegun 7.1.26, erf = 1 - t P(t)
# exp(-x^2), t = 1 / (1 + p |x|) (absolute error 1.5e-7 where erf >= 0.52); |x| < 0.5: the
# Maclaurin series of erf(x) / x in x^2, 8 terms for float32 (relative error below 1e-8) and 14
# for float64, so that small arguments keep their relative accuracy.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_SERIES = [(-1) ** n / (math.factorial(n) * (2 * n + 1)) * 2 / math.sqrt(math.pi) for n in range(14)]


def _erf_dtype(dtype: np.dtype) -> np.dtype:
    return np.promote_types(dtype, np.float32)


def erf_workspace(inputs, outputs, **_) -> int:
    out = outputs[0]
    dt = _erf_dtype(out.dtype)
    return chunks_workspace(out.shape, [dt, dt, dt, np.bool_])


def _erf_chunk(x, o, a, t, far, near) -> None:
    """erf(x) into o; x is read before o is written (in place is safe)."""
    f = a.dtype.type
    np.abs(x, out=a)
    np.less(a, f(0.5), out=near)
    np.multiply(a, f(_AS_P), out=t)
    np.add(t, f(1), out=t)
    np.reciprocal(t, out=t)
    np.multiply(t, f(_AS_A[-1]), out=far)
    for c in reversed(_AS_A[:-1]):
        np.add(far, f(c), out=far)
        np.multiply(far, t, out=far)
    np.multiply(a, a, out=a)  # x^2
    np.multiply(a, f(-1), out=t)
    np.exp(t, out=t)
    np.multiply(far, t, out=far)
    np.subtract(f(1), far, out=far)
    np.copysign(far, x, out=far, casting="same_kind")
    # The series where |x| < 0.5, on x^2 clipped to 0.25 so that it stays finite elsewhere.
    np.minimum(a, f(0.25), out=a)
    series = _SERIES[: 8 if a.dtype == np.float32 else 14]
    np.multiply(a, f(series[-1]), out=t)
    for c in reversed(series[1:-1]):
        np.add(t, f(c), out=t)
        np.multiply(t, a, out=t)
    np.add(t, f(series[0]), out=t)
    np.multiply(t, x, out=t, casting="same_kind")
    np.copyto(far, t, where=near)
    np.copyto(o, far, casting="unsafe")


@kernel("Erf", inplace=(0,), workspace=erf_workspace)
def erf_(x, *, out, ws=None):
    """Gauss's error function (numpy has none): relative error below 1e-6 for every finite x in
    float32 (the evaluation's own roundings included), 3e-7 in float64."""
    if not np.issubdtype(out.dtype, np.floating):
        apply_blocks(erf, out, x)  # integer Erf: rounded from the float64 evaluation
        return
    dt = _erf_dtype(out.dtype)
    with np.errstate(over="ignore", under="ignore"):
        run_chunks(_erf_chunk, out, [x], ws, "Erf", [dt, dt, dt, np.bool_], reads_before_writes=True)
