"""The shared int8 `.tflite` models, read by memplan and run whole inside its planned arena, against
TensorFlow Lite Micro's interpreter on the same input: every output byte equal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runtime.kernels import kernel_of

pytest.importorskip("tflite_micro")
tflite_reader = pytest.importorskip("runtime.tflite")

MODELS = Path(__file__).resolve().parents[4] / "shared" / "models" / "tflite"
NAMES = [
    "hello_world_int8.tflite",
    "micro_speech_quantized.tflite",
    "person_detect.tflite",
    "keyword_scrambled_8bit.tflite",
    "mobilenet_v2_quantized_1x3x224x224.tflite",
]


@pytest.mark.parametrize("name", NAMES)
def test_model_bit_exact_against_tflm(name):
    from tflite_micro.python.tflite_micro import runtime as tflm

    from runtime.session import Session

    path = MODELS / name
    if not path.exists():
        pytest.skip(f"{path.name} is not in ../shared/models/tflite/")
    buf = path.read_bytes()
    graph = tflite_reader.read_tflite(buf, max_tensor_bytes=1 << 30)
    missing = sorted({n.op_type for n in graph.nodes if kernel_of(n) is None})
    if missing:
        pytest.skip(f"no integer kernel yet for {missing}")
    rng = np.random.default_rng(7)
    feeds = {}
    for name_in in graph.inputs:
        t = graph.tensors[name_in]
        info = np.iinfo(t.dtype)
        feeds[name_in] = rng.integers(info.min, info.max + 1, t.shape).astype(t.dtype)
    ours = Session(graph).run(feeds)
    interpreter = tflm.Interpreter.from_bytes(buf, arena_size=8 << 20)
    for i, name_in in enumerate(graph.inputs):
        interpreter.set_input(feeds[name_in], i)
    interpreter.invoke()
    for i, name_out in enumerate(graph.outputs):
        expected = interpreter.get_output(i)
        got = np.asarray(ours[name_out])
        assert got.shape == expected.shape and got.dtype == expected.dtype
        differ = int((got != expected).sum())
        assert differ == 0, f"{name}: {differ} of {got.size} output elements differ from TensorFlow Lite Micro"
