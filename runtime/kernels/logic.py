"""Comparisons, boolean logic and Where, all with numpy's multidirectional broadcasting."""

from __future__ import annotations

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._blocks import apply_blocks
from runtime.kernels._scratch import ufunc_into


def _binary(op_type, ufunc):
    """Register the ONNX op `op_type` as one numpy ufunc written into `out`."""

    def run(a, b, *, out):
        ufunc_into(ufunc, a, b, out=out)

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type}: numpy's {ufunc.__name__}."
    kernel(op_type, inplace=(0, 1))(run)


_binary("Equal", np.equal)
_binary("Less", np.less)
_binary("Greater", np.greater)
_binary("LessOrEqual", np.less_equal)
_binary("GreaterOrEqual", np.greater_equal)
_binary("And", np.logical_and)
_binary("Or", np.logical_or)
_binary("Xor", np.logical_xor)
_binary("BitwiseAnd", np.bitwise_and)
_binary("BitwiseOr", np.bitwise_or)
_binary("BitwiseXor", np.bitwise_xor)


@kernel("Not", inplace=(0,))
def not_(x, *, out):
    np.logical_not(x, out=out)


@kernel("BitwiseNot", inplace=(0,))
def bitwise_not(x, *, out):
    np.invert(x, out=out)


@kernel("IsNaN")
def is_nan(x, *, out):
    np.isnan(x, out=out)


@kernel("IsInf")
def is_inf(x, *, out, detect_negative=1, detect_positive=1):
    np.isinf(x, out=out)
    if not detect_negative:
        out &= x > 0
    if not detect_positive:
        out &= x < 0


@kernel("Where", inplace=(1, 2))
def where(condition, x, y, *, out):
    def block(c, x, y, o):
        np.copyto(o, y)
        np.copyto(o, x, where=c)

    apply_blocks(block, out, condition, x, y)
