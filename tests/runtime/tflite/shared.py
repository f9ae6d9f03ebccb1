"""The real int8 models from TensorFlow Lite Micro, read where the team keeps them: `../shared/models/tflite/`
beside the repository (never copied into it). A test that needs one is skipped, saying so, when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

MODELS_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "models" / "tflite"
NAMES = (
    "hello_world_int8",
    "micro_speech_quantized",
    "keyword_scrambled_8bit",
    "person_detect",
    "mobilenet_v2_quantized_1x3x224x224",
)
SMALL = NAMES[:3]


def model_path(name: str) -> Path:
    path = MODELS_DIR / f"{name}.tflite"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in ../shared/models/tflite/ beside the repository")
    return path


def model_bytes(name: str) -> bytes:
    return model_path(name).read_bytes()
