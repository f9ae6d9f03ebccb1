"""How an integer tensor maps to real numbers: scale, zero point and (per channel) axis.

One frozen value per quantized tensor, shared by the format readers (`.tflite`, quantized ONNX),
the integer kernels and the pages that show a tensor's dtype and quantization. A float tensor
has none. ``real = scale * (q - zero_point)``; per-tensor parameters hold one element, per-channel
ones one per index of `axis`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class QuantParams:
    scale: np.ndarray  # float32 (TFLite stores float32 scales), one element or one per channel
    zero_point: np.ndarray  # int64, same length as `scale`
    axis: int | None = None  # the channel axis of per-channel parameters; None when per-tensor

    def __post_init__(self) -> None:
        scale = np.atleast_1d(np.asarray(self.scale, dtype=np.float32))
        zero = np.atleast_1d(np.asarray(self.zero_point, dtype=np.int64))
        if zero.size == 1 and scale.size > 1:
            zero = np.repeat(zero, scale.size)
        if scale.size != zero.size or scale.size == 0:
            raise ValueError(f"quantization: {scale.size} scales for {zero.size} zero points")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "zero_point", zero)
        if scale.size == 1:
            object.__setattr__(self, "axis", None)

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, QuantParams)
            and self.axis == other.axis
            and np.array_equal(self.scale, other.scale)
            and np.array_equal(self.zero_point, other.zero_point)
        )

    def __hash__(self) -> int:
        return hash((self.axis, self.scale.tobytes(), self.zero_point.tobytes()))

    def describe(self) -> dict[str, Any]:
        """JSON types for pages and reports: per-tensor values, or the channel count and ranges."""
        if not self.per_channel:
            return {"scale": float(self.scale[0]), "zero_point": int(self.zero_point[0])}
        return {
            "axis": int(self.axis or 0),
            "channels": int(self.scale.size),
            "scale_min": float(self.scale.min()),
            "scale_max": float(self.scale.max()),
            "zero_points": sorted({int(z) for z in self.zero_point})[:8],
        }
