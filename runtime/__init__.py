"""memplan's runtime: ONNX model -> graph -> memory problem, and a numpy executor inside the planned arena.

::

    from runtime import load_model, memory_problem, Session
    graph = load_model("model.onnx", dims={"N": 1})
    options = MemoryOptions(io="arena", workspace=True)
    problem = memory_problem(graph, options)
    session = Session(graph, "greedy_by_size", options, canary=True).prepare()
    outputs = session.run({"x": x})                      # timed, without tracing: session.stats.seconds
    session.run({"x": x}, measure="memory")              # traced: session.stats.outside_arena_bytes
"""

from __future__ import annotations

from runtime.batches import BatchSessions
from runtime.binding import Binding
from runtime.constants import Constant
from runtime.errors import (
    CanaryError,
    ExecutionError,
    ExternalDataError,
    FeedError,
    ModelError,
    PlanError,
    ShapeError,
    TensorTooLargeError,
    UnboundDimError,
    UnsupportedOpError,
)
from runtime.graph import DEFAULT_MAX_TENSOR_BYTES, Graph, Node, TensorInfo, load_model
from runtime.options import DEFAULT_ALIGNMENT, MemoryOptions
from runtime.params import ParameterStore
from runtime.pipeline import Pipeline
from runtime.problem import memory_problem, memory_schedule, reorder_graph, workspace_bytes, workspace_id
from runtime.session import Session
from runtime.stats import Measurement, RunStats, StepRecord, measure_runs

__all__ = [
    "Pipeline",
    "ParameterStore",
    "Binding",
    "BatchSessions",
    "DEFAULT_ALIGNMENT",
    "DEFAULT_MAX_TENSOR_BYTES",
    "MemoryOptions",
    "CanaryError",
    "Constant",
    "ExecutionError",
    "ExternalDataError",
    "Graph",
    "FeedError",
    "Measurement",
    "ModelError",
    "Node",
    "PlanError",
    "RunStats",
    "Session",
    "ShapeError",
    "StepRecord",
    "TensorInfo",
    "TensorTooLargeError",
    "UnboundDimError",
    "UnsupportedOpError",
    "load_model",
    "measure_runs",
    "memory_problem",
    "memory_schedule",
    "reorder_graph",
    "workspace_bytes",
    "workspace_id",
]
