"""TensorFlow Lite models: `.tflite` in (`read_tflite`, the same `Graph` an ONNX file becomes) and a
plan back out (`export_plan`, TensorFlow Lite Micro's offline plan metadata in a copy of the model)."""

from __future__ import annotations

from runtime.tflite.export import Export, export_plan
from runtime.tflite.model import IDENTIFIER, is_tflite
from runtime.tflite.reader import read_tflite

__all__ = ["IDENTIFIER", "Export", "export_plan", "is_tflite", "read_tflite"]
