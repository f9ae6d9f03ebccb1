"""Models quantized by onnxruntime's own tool, as users make them: `quantize_static` over a few
calibration inputs (min-max calibration, so their order does not matter)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def calibrated(
    float_path: Path,
    path: Path,
    inputs: list[dict[str, np.ndarray]],
    *,
    qoperator: bool = False,
    per_channel: bool = True,
) -> Path:
    """Write `float_path`'s model quantized to `path` and return `path`: QDQ with int8 activations
    (default), or the QOperator format with uint8 activations; int8 weights, per channel unless told."""
    from onnxruntime import quantization

    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.left = list(inputs)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.left.pop() if self.left else None

    quantization.quantize_static(
        str(float_path),
        str(path),
        Reader(),
        quant_format=quantization.QuantFormat.QOperator if qoperator else quantization.QuantFormat.QDQ,
        per_channel=per_channel,
        activation_type=quantization.QuantType.QUInt8 if qoperator else quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
    )
    return path
