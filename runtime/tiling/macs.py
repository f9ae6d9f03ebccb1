"""Multiply-accumulates of a node, from its static shapes: the cost a tiling repeats.

Convolutions (Conv, memplan's ConvAct and PointwiseConvAdd, QLinearConv, TFLite's CONV_2D and
DEPTHWISE_CONV_2D), Gemm, MatMul and FULLY_CONNECTED (and their integer forms) are counted, as
MCUNetV2 and the papers it compares with count them; every other op counts 0.
"""

from __future__ import annotations

import math

from runtime.graph import Graph, Node


def node_macs(graph: Graph, node: Node) -> int:
    if not node.outputs or not node.outputs[0] or node.outputs[0] not in graph.tensors:
        return 0
    out = graph.tensors[node.outputs[0]].shape
    op = node.op_type
    if op in ("Conv", "ConvAct", "PointwiseConvAdd", "ConvInteger", "QLinearConv"):
        weight_name = node.inputs[3] if op == "QLinearConv" else node.inputs[1]
        weights = graph.tensors[weight_name].shape  # (Cout, Cin / group, kH, kW)
        return math.prod(out) * math.prod(weights[1:])
    if node.domain == "tflite" and op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
        weights = graph.tensors[node.inputs[1]].shape  # OHWI, 1HWC (one tap per output), (O, I)
        return math.prod(out) * math.prod(weights[1:3] if op == "DEPTHWISE_CONV_2D" else weights[1:])
    if op in ("Gemm", "MatMul", "MatMulInteger", "QGemm", "QLinearMatMul") and len(node.inputs) >= 2:
        a = graph.tensors[node.inputs[0]].shape
        inner = a[0] if op in ("Gemm", "QGemm") and int(node.attributes.get("transA", 0)) else a[-1]
        return math.prod(out) * inner
    return 0


def graph_macs(graph: Graph) -> int:
    return sum(node_macs(graph, n) for n in graph.nodes)
