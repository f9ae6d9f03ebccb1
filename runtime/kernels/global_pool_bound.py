"""GlobalAveragePool's call bound once per step (`runtime.kernels.planes.PlaneWise.bind`, at a
session's prepare), for float32 with compiled loops: one compiled pass taking each plane's
mean, which may run with the output over its input (MobileNet and EfficientNet heads are
planned so). Plane (n, c)'s mean is written after the plane is read, at flat position
n * C + c, inside a plane already read ((n * C + c) * P >= n * C + c), so no chunk through
scratch is needed, where the general call took them through `planes`' chunks, several times
slower. It is the bind of the compiled GlobalAveragePool route (`pool_routes`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from runtime.kernels._jit import compiled
from runtime.kernels.conv import jit_conv
from runtime.kernels.protocol import Bound


def _plane_means(x, out, inv):  # type: ignore[no-untyped-def]
    """out[p] = mean of row p of x (planes, P): row p read whole before out[p] is written."""
    for p in range(x.shape[0]):
        row = x[p]
        total = np.float32(0.0)
        for j in range(row.size):
            total += row[j]
        out[p] = total * inv


plane_means = compiled(_plane_means)


def bind_global_average(inputs, outputs, attrs: dict, slow) -> Bound | None:
    x, y = inputs[0], outputs[0] if outputs else None
    if plane_means is None or x is None or y is None or len(x.shape) < 3 or x.dtype != jit_conv.DTYPE:
        return None
    warm()
    planes, size = x.shape[0] * x.shape[1], math.prod(x.shape[2:])
    inv = np.float32(1.0 / size)

    def bound(x, *, out, ws=None, **given):
        if not jit_conv.usable(x, out):
            slow((x,), out, ws, attrs)
            return
        plane_means(x.reshape(planes, size), out.reshape(planes), inv)

    return Bound(bound)  # a session calls it without the attributes


@functools.cache
def warm() -> None:
    """Compile the loop (or load it from numba's cache) on tiny calls, when a session binds it."""
    if plane_means is None:
        return
    x = np.ones((2, 3), jit_conv.DTYPE)
    read_only = x.view()
    read_only.flags.writeable = False  # a session's tensors are
    for source in (x, read_only):
        plane_means(source, np.empty(2, jit_conv.DTYPE), np.float32(1 / 3))
