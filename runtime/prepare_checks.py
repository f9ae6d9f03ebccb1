"""What a `runtime.Session` checks when it prepares, before anything runs: every node has a kernel
(all the ops without one listed in one error), and the plan places every buffer of the problem and,
unless told not to check, passes `planner.check_plan`."""

from __future__ import annotations

import planner
from planner import Plan, Problem
from runtime.errors import PlanError, UnsupportedOpError
from runtime.graph import Graph
from runtime.kernels import Kernel, kernel_of


def resolve_kernels(graph: Graph) -> dict[str, Kernel]:
    """Each node's kernel by node name; UnsupportedOpError naming every op without one."""
    found: dict[str, Kernel] = {}
    missing: dict[str, list[str]] = {}
    for node in graph.nodes:
        k = kernel_of(node)
        if k is None:
            label = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            missing.setdefault(label, []).append(node.name)
            continue
        used = [n for n in node.outputs[1:] if n]
        if used and not k.multi_output:
            missing.setdefault(f"{node.op_type} with {len(used) + 1} outputs", []).append(node.name)
            continue
        found[node.name] = k
    if missing:
        listed = "; ".join(
            f"{op} (node{'s' if len(ns) > 1 else ''} {', '.join(map(repr, ns[:5]))}{', ...' if len(ns) > 5 else ''})"
            for op, ns in sorted(missing.items())
        )
        raise UnsupportedOpError(f"memplan has no kernel for: {listed}; see runtime.kernels.supported_ops()", missing)
    return found


def check_plan(problem: Problem, plan: Plan, check: bool) -> None:
    """PlanError when `plan` misses a buffer of `problem`, or (with `check`) the checker refuses it."""
    missing = [b.id for b in problem.buffers if b.id not in plan.offsets]
    if missing:
        raise PlanError(
            f"plan {plan.strategy!r} places no offset for buffer(s) {missing[:10]}; was it made for this model and options?"
        )
    if check:
        result = planner.check_plan(problem, plan)
        if not result.ok:
            raise PlanError(f"plan {plan.strategy!r} is not valid for this model's memory problem: {result}")
