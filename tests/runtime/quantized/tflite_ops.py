"""One-operator `.tflite` models for the integer kernels' tests, run by TensorFlow Lite Micro and by memplan.

The models are written by `runtime.tflite.writer` (`one_op_model`, `Tensor`, `OMITTED`, `q`,
`lstm_tensors`, re-exported here for the tests). `run_tflm` runs one in the `tflite-micro` wheel's
interpreter (reference kernels); `run_tflm_steps` invokes one interpreter several times, its states
carried from one invocation to the next; `run_kernel` calls memplan's kernel of the same builtin
with the same tensors, attributes and quantization, into a preallocated output and a workspace of
the size the kernel asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime.kernels import TensorMeta, call, get_kernel
from runtime.tflite.writer import (  # noqa: F401 - the tests import these from here
    ACTIVATIONS,
    OMITTED,
    OPTIONS,
    PADDINGS,
    TYPES,
    Tensor,
    lstm_tensors,
    one_op_model,
    q,
)

# ---- running it ------------------------------------------------------------------------------------------


def run_tflm(model: bytes, feeds: list[np.ndarray], outputs: int = 1) -> list[np.ndarray]:
    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    interpreter = runtime.Interpreter.from_bytes(
        model, arena_size=max(1 << 16, 8 * len(model) + sum(f.nbytes for f in feeds) * 8)
    )
    for i, x in enumerate(feeds):
        interpreter.set_input(x, i)
    interpreter.invoke()
    return [np.array(interpreter.get_output(i)) for i in range(outputs)]


def run_tflm_steps(model: bytes, steps: list[list[np.ndarray]], outputs: int = 1) -> list[list[np.ndarray]]:
    """The outputs of consecutive invocations of one TensorFlow Lite Micro interpreter (its states
    carried from one to the next), one list of feeds per invocation."""
    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    feed_bytes = sum(f.nbytes for f in steps[0]) if steps else 0
    interpreter = runtime.Interpreter.from_bytes(model, arena_size=max(1 << 16, 8 * len(model) + 8 * feed_bytes))
    got = []
    for feeds in steps:
        for i, x in enumerate(feeds):
            interpreter.set_input(x, i)
        interpreter.invoke()
        got.append([np.array(interpreter.get_output(i)) for i in range(outputs)])
    return got


def run_kernel(
    op: str, inputs: list[Tensor], outputs: list[Tensor], options: dict[str, Any], feeds: list[np.ndarray]
) -> list[np.ndarray]:
    """memplan's kernel for builtin `op` on the same tensors: constants from the model, the rest
    from `feeds` in order, into outputs allocated here (the session would hand arena views)."""
    k = get_kernel(op, "tflite")
    assert k is not None, f"no tflite kernel for {op}"
    it = iter(feeds)
    values = [t.data if t.data is not None else next(it) for t in inputs]
    attrs = dict(options)
    attrs["q_inputs"] = tuple(t.quant for t in inputs)
    attrs["q_outputs"] = tuple(t.quant for t in outputs)
    outs = [np.full(t.shape, 77, dtype=t.dtype) for t in outputs]
    metas_in = [TensorMeta(tuple(t.shape), np.dtype(t.dtype)) for t in inputs]
    metas_out = [TensorMeta(tuple(t.shape), np.dtype(t.dtype)) for t in outputs]
    ws = None
    if k.workspace is not None:
        size = k.workspace(metas_in, metas_out, **attrs)
        ws = np.zeros(size, dtype=np.uint8) if size else None
    call(k, values, outs, ws, attrs, 0)
    return outs


def recorded_calls(monkeypatch: Any, module: Any, name: str) -> list[tuple]:
    """`module.name`, a compiled loop, replaced by one that records the numba types of each call's
    arguments before calling it: the list it fills (one signature per distinct entry)."""
    numba = pytest.importorskip("numba")
    loop = getattr(module, name)
    calls: list[tuple] = []

    def recording(*args):
        calls.append(tuple(numba.typeof(a) for a in args))
        return loop(*args)

    monkeypatch.setattr(module, name, recording)
    return calls
