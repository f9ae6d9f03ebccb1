"""Kernels' prepare hooks: a session compiles its nodes' loops when it prepares; planning alone
compiles nothing (a plan made in the web process must not pay for numba)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

from runtime.kernels import JIT_ENABLED

_CHILD = """
import sys
import onnx
import runtime
from runtime.kernels import jit_activation, jit_rnn
from runtime.kernels.conv import jit_conv, jit_depthwise

LOOPS = [jit_rnn.gru_loop, jit_depthwise.depthwise, jit_activation.activate, jit_activation.softmax_rows,
         jit_conv.bias_act]
graph = runtime.load_model(onnx.load(sys.argv[1]))
runtime.memory_problem(graph, runtime.MemoryOptions())
print(*[len(loop.signatures) for loop in LOOPS])
session = runtime.Session(graph, "greedy_by_size").prepare()
print(*[len(loop.signatures) for loop in LOOPS])
"""


def _model(path: str) -> None:
    """A depthwise Conv and a dense one, each with a Relu (fused into ConvAct at load), a
    Sigmoid, a Softmax, and a GRU over the result's rows."""
    hidden, size, seq = 8, 4, 4
    rng = np.random.default_rng(3)

    def weight(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(int(np.prod(shape))))

    inits = [
        weight("dw", (4, 1, 3, 3)),
        weight("pw", (4, 4, 1, 1)),
        weight("W", (1, 3 * hidden, size)),
        weight("R", (1, 3 * hidden, hidden)),
        helper.make_tensor("shape", TensorProto.INT64, (3,), [seq, 4, size]),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "dw"], ["a"], group=4, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "pw"], ["c"]),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("Sigmoid", ["d"], ["e"]),
        helper.make_node("Softmax", ["e"], ["f"]),
        helper.make_node("Reshape", ["f", "shape"], ["g"]),
        helper.make_node("GRU", ["g", "W", "R"], ["y", "h"], hidden_size=hidden),
    ]
    graph = helper.make_graph(
        nodes,
        "loops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, 4, 4))],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, (1, 4, hidden))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


@pytest.mark.skipif(not JIT_ENABLED, reason="compiled loops are off (no numba, or MEMPLAN_JIT=0)")
def test_planning_compiles_nothing_and_prepare_compiles_the_nodes_loops(tmp_path) -> None:
    path = str(tmp_path / "loops.onnx")
    _model(path)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, path], env=dict(os.environ), capture_output=True, text=True, check=True
    )
    after_planning, after_prepare = done.stdout.split("\n")[:2]
    assert after_planning.split() == ["0"] * 5
    assert all(int(n) >= 1 for n in after_prepare.split()), after_prepare
