"""memplan's own fused ops (domain "memplan"): made by the loader (`runtime.fuse`), never read
from a model file.

PointwiseConvAdd(X, W, B, R) = Conv(X, W, B) + R for a 1x1 convolution (stride 1, no padding,
one group): the residual connection of ResNet bottlenecks and MobileNetV2 blocks. The
convolution's output is never stored whole: it is computed a band of output channels at a
time into scratch and added straight into the result, and the result may be R's own
memory (R dies at the Add in those networks). Separately, a Conv output as large as R is
live beside R at that step; fused, only a band of it is.
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import MEMPLAN_DOMAIN, TensorMeta, kernel
from runtime.kernels._scratch import units_within

# Bytes of one band of output channels (at least one channel): at 1 MiB the banded matmuls
# run as fast as one whole matmul followed by the Add (measured single-threaded on
# ResNet-50's shapes); smaller bands lose speed, larger ones only cost scratch.
BAND_BYTES = 1024 * 1024


def _band(channels: int, plane: int, itemsize: int) -> int:
    """Output channels per band."""
    return units_within(BAND_BYTES, plane * itemsize, channels)


def _pointwise_add_workspace(inputs: list[TensorMeta | None], outputs: list[TensorMeta | None], **_: object) -> int:
    out = outputs[0]
    assert out is not None
    plane = int(np.prod(out.shape[2:], dtype=np.int64))
    return _band(out.shape[1], plane, out.dtype.itemsize) * plane * out.dtype.itemsize


@kernel("PointwiseConvAdd", domain=MEMPLAN_DOMAIN, workspace=_pointwise_add_workspace, inplace=(3,))
def pointwise_conv_add(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, r: np.ndarray, *, out: np.ndarray, ws: np.ndarray | None = None
) -> None:
    n, channels = out.shape[0], out.shape[1]
    plane = int(np.prod(out.shape[2:], dtype=np.int64))
    rows = _band(channels, plane, out.dtype.itemsize)
    if ws is not None:
        scratch = ws[: rows * plane * out.dtype.itemsize].view(out.dtype).reshape(rows, plane)
    else:
        scratch = np.empty((rows, plane), dtype=out.dtype)
    weights = w.reshape(channels, -1)
    for i in range(n):
        source = x[i].reshape(weights.shape[1], plane)
        residual = r[i].reshape(channels, plane)
        target = out[i].reshape(channels, plane)
        for c in range(0, channels, rows):
            k = min(rows, channels - c)
            band = scratch[:k]
            np.matmul(weights[c : c + k], source, out=band)
            if b is not None:
                band += b[c : c + k, None]
            # Element by element, so `target` may be `residual`'s own memory.
            np.add(residual[c : c + k], band, out=target[c : c + k])
