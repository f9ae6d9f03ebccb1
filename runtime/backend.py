"""memplan as an `onnx.backend.base.Backend`, so onnx's own backend test suite can run it.

``prepare`` loads the model (checks, folding, static shapes), plans it with a strategy
(the planner's default unless ``strategy=`` says otherwise) and prepares a `Session`;
``BackendRep.run`` feeds positional inputs in graph-input order and returns the outputs
in graph-output order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

import planner
from runtime.graph import load_model
from runtime.options import MemoryOptions
from runtime.session import Session


class MemplanRep(BackendRep):
    def __init__(self, session: Session) -> None:
        self.session = session
        self.feeds: dict[str, np.ndarray] = {}  # the last run's, for a verdict that runs the model again

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        graph = self.session.graph
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feeds = dict(zip(graph.inputs, arrays, strict=False))
        self.feeds = feeds
        outputs = self.session.run(feeds)
        return tuple(outputs[name] for name in graph.outputs)


class MemplanBackend(Backend):
    strategy = planner.DEFAULT_STRATEGY
    canary = False

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str = "CPU", **kwargs: Any) -> MemplanRep:
        if not cls.supports_device(device):
            raise ValueError(f"device {device!r}: memplan runs on 'CPU' only")
        options = MemoryOptions(io=kwargs.get("io", "arena"))
        graph = load_model(model, dims=kwargs.get("dims"), default_dim=kwargs.get("default_dim"), fuse=options.fuse)
        session = Session(
            graph,
            kwargs.get("strategy", cls.strategy),
            options,
            canary=kwargs.get("canary", cls.canary),
        )
        return MemplanRep(session.prepare())

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


def run_model(model: onnx.ModelProto, inputs: Sequence[np.ndarray], **kwargs: Any) -> tuple[np.ndarray, ...]:
    return MemplanBackend.run_model(model, inputs, **kwargs)


prepare = MemplanBackend.prepare
supports_device = MemplanBackend.supports_device
