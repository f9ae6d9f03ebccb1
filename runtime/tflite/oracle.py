"""`.tflite` models as their own runtimes compute them: the oracles of `runtime.oracle` for this format.

TensorFlow Lite Micro's interpreter (pip `tflite-micro`, its reference kernels) first: memplan's
integer kernels keep its arithmetic, so integer outputs must equal its own bit for bit. The TFLite
interpreter (pip `ai-edge-litert`) next, for the float operators TensorFlow Lite Micro lacks.
Inputs and outputs are matched by position, in the order of the main subgraph, with the names
memplan's reader gives them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from runtime.tflite.reader import read_tflite

ENGINES = ("tflite-micro", "litert")
ARENAS = (16 << 20, 256 << 20)  # TensorFlow Lite Micro's arena: tried in turn, the larger for big models


def outputs_of(engine: str, data: bytes, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of the model as `engine` ("tflite-micro" or "litert") computes it, by memplan's names."""
    graph = read_tflite(data, max_tensor_bytes=1 << 31)
    missing = [name for name in graph.inputs if name not in feeds]
    if missing:
        raise ValueError(f"no values fed for inputs {missing}")
    values = [np.ascontiguousarray(feeds[name]) for name in graph.inputs]
    if engine == "tflite-micro":
        got = _micro(data, values, len(graph.outputs))
    elif engine == "litert":
        got = _litert(data, values)
    else:
        raise ValueError(f"unknown .tflite oracle {engine!r}; accepted: {list(ENGINES)}")
    return dict(zip(graph.outputs, got, strict=True))


def _micro(data: bytes, values: list[np.ndarray], n_outputs: int) -> list[np.ndarray]:
    from tflite_micro.python.tflite_micro import runtime as tflm

    failure: Exception | None = None
    for arena in ARENAS:
        try:
            interpreter = tflm.Interpreter.from_bytes(data, arena_size=arena)
        except Exception as e:  # its arena too small, or an operator it lacks: the larger arena, then say why
            failure = e
            continue
        for index, value in enumerate(values):
            interpreter.set_input(value, index)
        interpreter.invoke()
        return [np.array(interpreter.get_output(i)) for i in range(n_outputs)]
    raise RuntimeError(f"TensorFlow Lite Micro could not allocate the model: {failure}")


def _litert(data: bytes, values: list[np.ndarray]) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data, num_threads=1)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), values, strict=True):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [np.array(interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()]
