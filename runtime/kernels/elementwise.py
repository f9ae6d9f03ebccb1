"""Arithmetic: broadcasting binary ops, variadic Sum/Max/Min, and unary math functions.

Broadcasting is numpy's multidirectional rule, which ONNX uses too; the dispatcher has
already given `out` the broadcast shape. Every kernel here is safe when `out` shares its
memory with an input (the planner's in-place reuse): single ufunc calls are, and the
multi-step ones go through `apply_blocks` or `readable`.
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._blocks import apply_blocks, erf, readable, same_memory
from runtime.kernels._scratch import UFUNC_BUFFER


def _is_int(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.integer)


def _broadcast(ufunc, a, b, out) -> None:
    """One ufunc call; an operand broadcast to `out` makes numpy allocate its iteration buffers
    (32 KiB of float32 for a bias over rows), so those calls run with small ones."""
    if a.shape == out.shape and b.shape == out.shape:
        ufunc(a, b, out=out)
        return
    previous = np.setbufsize(UFUNC_BUFFER)
    try:
        ufunc(a, b, out=out)
    finally:
        np.setbufsize(previous)


@kernel("Add", inplace=(0, 1))
def add(a, b, *, out):
    _broadcast(np.add, a, b, out)


@kernel("Sub", inplace=(0, 1))
def sub(a, b, *, out):
    _broadcast(np.subtract, a, b, out)


@kernel("Mul", inplace=(0, 1))
def mul(a, b, *, out):
    _broadcast(np.multiply, a, b, out)


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
            _broadcast(np.divide, a, b, out)
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
            np.power(a, b, out=out, casting="unsafe")


@kernel("Mod", inplace=(0, 1))
def mod(a, b, *, out, fmod=0):
    """fmod=0: the remainder takes the divisor's sign (Python's %); fmod=1: the dividend's (C's fmod)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if fmod:
            np.fmod(a, b, out=out)
        else:
            np.mod(a, b, out=out)


def _fold(ufunc, inputs, out):
    """out = ufunc(...ufunc(inputs[0], inputs[1])..., inputs[-1]) with broadcasting.

    The first call reads inputs 0 and 1 as it writes, so either may be `out` itself (the
    planner's in-place case) without a copy; any other overlap is copied first.
    """
    inputs = [x if i < 2 and same_memory(x, out) else readable(x, out) for i, x in enumerate(inputs)]
    if len(inputs) == 1:
        np.copyto(out, inputs[0])
        return
    ufunc(inputs[0], inputs[1], out=out)
    for x in inputs[2:]:
        ufunc(out, x, out=out)


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
    kernel(op_type, inplace=(0,))(run)


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


@kernel("Erf", inplace=(0,))
def erf_(x, *, out):
    """Gauss's error function (numpy has none): see `_blocks.erf` for its accuracy."""
    apply_blocks(erf, out, x)
