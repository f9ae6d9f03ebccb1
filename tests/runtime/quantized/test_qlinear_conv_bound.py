"""QLinearConv's bound call makes its steps (each loop and BLAS call with its views and arguments) once, at
prepare, and replays them: its outputs within one step of onnxruntime's on both compiled routes, with the
input inside the arena (the steps primed) and fed by the caller (a fresh view each run: the steps made per
call), and after the thread's shared scratch was replaced by a larger one (the steps made again on it)."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels import JIT_ENABLED, shared_scratch
from runtime.options import MemoryOptions
from tests.runtime.kernels.harness import close, run_ort

I8 = np.int8


def _model(rng: np.random.Generator, channels: int, group: int) -> onnx.ModelProto:
    """One 3x3 QLinearConv, padded, over a (1, channels, 13, 11) int8 map; per-channel filter scales."""
    w = rng.integers(-127, 128, (channels, channels // group, 3, 3)).astype(I8)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
        numpy_helper.from_array(np.array(3, I8), "xz"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array((rng.random(channels) * 0.004 + 0.001).astype(np.float32), "ws"),
        numpy_helper.from_array(np.zeros(channels, I8), "wz"),
        numpy_helper.from_array(np.array(0.2, np.float32), "ys"),
        numpy_helper.from_array(np.array(-2, I8), "yz"),
        numpy_helper.from_array(rng.integers(-800, 800, channels).astype(np.int32), "b"),
    ]
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1, 1, 1, 1], group=group
    )
    shape = [1, channels, 13, 11]
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT8, shape)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.skipif(not JIT_ENABLED, reason="the compiled routes' steps")
@pytest.mark.parametrize("group", [1, 24], ids=["gemm", "depthwise"])
@pytest.mark.parametrize("io", ["arena", "external"])
def test_bound_steps_match_onnxruntime_primed_fed_and_after_the_scratch_moved(group, io):
    rng = np.random.default_rng(17)
    model = _model(rng, 24, group)
    feeds = [rng.integers(-128, 128, (1, 24, 13, 11)).astype(I8) for _ in range(3)]
    got: list[np.ndarray] = []

    def runs() -> None:  # in a thread of its own: the larger shared scratch it makes dies with it
        options = MemoryOptions(io=io, workspace=False)
        session = runtime.Session(runtime.load_model(model), "greedy_by_size", options).prepare()
        for run, x in enumerate(feeds):
            if run == 2:
                shared_scratch(1 << 22)  # a larger shared buffer replaces the one the steps were made on
            got.append(session.run({"x": x})["y"])

    thread = threading.Thread(target=runs)
    thread.start()
    thread.join()
    assert len(got) == len(feeds)
    for run, x in enumerate(feeds):
        want = run_ort(model, {"x": x})[0]
        assert len(np.unique(want)) > 50  # not saturated
        close([got[run].astype(np.float32)], [want.astype(np.float32)], rtol=0, atol=1, what=f"run {run}")
