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
from runtime.kernels import jit_rnn

graph = runtime.load_model(onnx.load(sys.argv[1]))
runtime.memory_problem(graph, runtime.MemoryOptions())
print(len(jit_rnn.gru_loop.signatures))
session = runtime.Session(graph, "greedy_by_size").prepare()
print(len(jit_rnn.gru_loop.signatures))
"""


def _gru_model(path: str) -> None:
    hidden, size, seq = 8, 4, 5
    rng = np.random.default_rng(3)
    inits = [
        helper.make_tensor("W", TensorProto.FLOAT, (1, 3 * hidden, size), rng.standard_normal(3 * hidden * size)),
        helper.make_tensor("R", TensorProto.FLOAT, (1, 3 * hidden, hidden), rng.standard_normal(3 * hidden * hidden)),
    ]
    node = helper.make_node("GRU", ["x", "W", "R"], ["y", "h"], hidden_size=hidden)
    graph = helper.make_graph(
        [node],
        "gru",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (seq, 1, size))],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, (1, 1, hidden))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


@pytest.mark.skipif(not JIT_ENABLED, reason="compiled loops are off (no numba, or MEMPLAN_JIT=0)")
def test_planning_compiles_nothing_and_prepare_compiles_the_nodes_loops(tmp_path) -> None:
    path = str(tmp_path / "gru.onnx")
    _gru_model(path)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, path], env=dict(os.environ), capture_output=True, text=True, check=True
    )
    after_planning, after_prepare = done.stdout.split("\n")[:2]
    assert after_planning.split()[0] == "0"
    assert int(after_prepare) >= 1
