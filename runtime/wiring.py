"""What the load-time fusions ask of a node list: who reads and who writes each tensor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from runtime.kernels import DEFAULT_DOMAINS


def is_onnx_op(node: onnx.NodeProto | None, *op_types: str) -> bool:
    """`node` is one of ONNX's own `op_types` (not another domain's op of that name)."""
    return node is not None and node.op_type in op_types and node.domain in DEFAULT_DOMAINS


@dataclass(frozen=True)
class Wiring:
    """How many nodes read each tensor, and which node writes it."""

    readers: Counter[str]
    producer: dict[str, onnx.NodeProto]

    @classmethod
    def of(cls, nodes: Sequence[onnx.NodeProto]) -> Wiring:
        readers = Counter(name for node in nodes for name in node.input if name)
        return cls(readers, {out: node for node in nodes for out in node.output if out})
