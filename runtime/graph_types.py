"""The values a loaded model is made of: `Node`, `TensorInfo` and `Graph`, whatever its format.

`runtime.graph.load_model` builds them from an ONNX file, `runtime.tflite` from a `.tflite` one;
both import them from here so that neither format's reader depends on the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from runtime.constants import Constant
from runtime.errors import ModelError
from runtime.quantization import QuantParams

DEFAULT_MAX_TENSOR_BYTES = 4 << 30

FUSIONS = (
    "batchnorm_into_conv",
    "pointwise_conv_add",
    "gelu",
    "conv_activation",
    "squeeze_excite",
    "qdq",
)  # the keys of `Graph.fusions`


@dataclass(frozen=True)
class Node:
    """One step of the schedule. Omitted optional inputs and outputs are ``""``."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Mapping[str, Any]
    opset: int
    domain: str = ""
    proto: onnx.NodeProto | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    kind: str  # "input", "output", "activation" or "constant"
    producer: str | None  # name of the node writing it; None for inputs and constants
    consumers: tuple[str, ...]  # names of the nodes reading it, in schedule order
    quant: QuantParams | None = None  # integer tensors of quantized models (`runtime.quantization`)


@dataclass
class Graph:
    """A loaded model: nodes in schedule order and a static type for every tensor they touch."""

    name: str
    nodes: tuple[Node, ...]
    tensors: dict[str, TensorInfo]
    inputs: tuple[str, ...]  # graph inputs the caller feeds (initializers excluded)
    outputs: tuple[str, ...]
    constants: dict[str, Constant]  # initializers, Constant nodes and folded results still in use
    opset: int
    dims: dict[str, int]  # each dim name's size, where all the axes it names got one size
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES
    model_dir: str | None = None
    folded: int = 0  # nodes removed by constant folding
    # Nodes each load-time fusion made (`FUSIONS`): BatchNormalization folded into the Conv
    # before it, 1x1 Conv -> Add pairs made one PointwiseConvAdd, Div -> Erf -> Add -> Mul -> Mul
    # chains made one Gelu.
    fusions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FUSIONS, 0))

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"no tensor named {name!r} in graph {self.name!r}") from None

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise ModelError(f"no node named {name!r} in graph {self.name!r}")

    def by_kind(self, kind: str) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.kind == kind]
