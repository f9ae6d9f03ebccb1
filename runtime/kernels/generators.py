"""Ops that make tensors from shapes and attributes: Shape, Size, Constant,
ConstantOfShape and Range."""

from __future__ import annotations

import numpy as np

from runtime.kernels import kernel


@kernel("Shape")
def shape(data, *, out, start=0, end=None):
    """data.shape[start:end]; out-of-range bounds clamp (opset 15), as Python slicing does."""
    out[...] = data.shape[start:end]


@kernel("Size")
def size(data, *, out):
    out[...] = data.size


_CONSTANT_ATTRIBUTES = (
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
)


@kernel("Constant")
def constant(*, out, **attributes):
    """Exactly one of value, value_float(s), value_int(s), value_string(s); sparse_value is
    not supported."""
    given = [name for name in attributes if name in _CONSTANT_ATTRIBUTES]
    if "sparse_value" in attributes or len(given) != 1:
        raise ValueError(f"Constant: needs exactly one of {', '.join(_CONSTANT_ATTRIBUTES)}; got {sorted(attributes)}")
    out[...] = np.asarray(attributes[given[0]]).reshape(out.shape)


@kernel("ConstantOfShape")
def constant_of_shape(shape, *, out, value=None):
    """Filled with the one element of `value` (float32 zero by default)."""
    out.fill(0 if value is None else np.asarray(value).reshape(-1)[0])


@kernel("Range")
def range_(start, limit, delta, *, out):
    """out[i] = start + i * delta for the preallocated length max(ceil((limit - start) / delta), 0)."""
    np.multiply(np.arange(out.shape[0]), np.asarray(delta), out=out, casting="unsafe")
    out += np.asarray(start, dtype=out.dtype)
