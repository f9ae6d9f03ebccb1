"""Running training steps inside one planned arena.

`TrainingSession(step, "greedy_by_size").prepare()` plans `training_problem(step)` (or takes a
Plan for it), refuses a plan `planner.check_plan` rejects, allocates one aligned arena, binds
every tensor as a view at its planned offset and writes the initial parameters and optimizer
state there once. `run(feeds)` copies the batch and its labels in, runs every step of the
schedule with the kernels' contract of `runtime.kernels`, and returns the loss. Parameters and
optimizer state never leave the arena between steps: their updates write their own bytes.

A loss that is not finite stops the step right after the loss node, before any backward op or
update runs, so parameters and optimizer state keep the values they had (NonFiniteLossError).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

import planner
from planner import Plan
from runtime.errors import ExecutionError, InputError, PlanError
from runtime.kernels import Kernel, call, get_kernel
from runtime.options import MemoryOptions
from runtime.problem import workspace_id
from runtime.training.build import TrainingStep
from runtime.training.plans import training_problem


class NonFiniteLossError(ExecutionError):
    """The loss of a step is NaN or infinite; no update of that step was applied."""


class TrainingSession:
    """Run `step` repeatedly inside the arena of `plan` (a Plan for `training_problem(step)` or a strategy name)."""

    def __init__(
        self, step: TrainingStep, plan: Plan | str = planner.DEFAULT_STRATEGY, options: MemoryOptions | None = None
    ):
        self.step = step
        self.problem = training_problem(step, options)
        self._plan_arg = plan
        self.plan: Plan | None = None
        self.arena: np.ndarray | None = None
        self.steps_run = 0

    def prepare(self) -> TrainingSession:
        if self.arena is not None:
            return self
        graph = self.step.graph
        missing = sorted({n.op_type for n in graph.nodes if get_kernel(n.op_type) is None})
        if missing:
            raise PlanError(f"no kernel registered for {missing}")
        plan = planner.plan(self.problem, self._plan_arg) if isinstance(self._plan_arg, str) else self._plan_arg
        result = planner.check_plan(self.problem, plan)
        if not result.ok:
            raise PlanError(f"plan {plan.strategy!r} is not valid for this training step: {result}")
        self.plan = plan
        raw = np.zeros(plan.arena_bytes + 64, dtype=np.uint8)
        shift = (-raw.ctypes.data) % 64
        self.arena = raw[shift : shift + plan.arena_bytes]
        self._views: dict[str, np.ndarray] = {}
        self._ws: dict[str, np.ndarray] = {}
        for b in self.problem.buffers:
            off = plan.offsets[b.id].offset
            raw_view = self.arena[off : off + b.size]
            if b.id.endswith("::ws") and b.id not in graph.tensors:
                self._ws[b.id] = raw_view
            else:
                t = graph.tensors[b.id]
                self._views[b.id] = raw_view.view(t.dtype).reshape(t.shape)
        for name, value in self.step.state.items():
            self._views[name][...] = value
        self._compiled = [self._compile(n) for n in graph.nodes]
        self._loss_index = next(i for i, n in enumerate(graph.nodes) if n.name == self.step.loss_node)
        return self

    def _compile(self, node) -> tuple:
        kernel: Kernel = get_kernel(node.op_type)  # type: ignore[assignment]
        ins: list[np.ndarray | None] = []
        for n in node.inputs:
            if not n:
                ins.append(None)
            elif n in self._views:
                view = self._views[n].view()
                view.flags.writeable = False
                ins.append(view)
            else:
                ins.append(self.step.graph.constants[n].value())
        outs = [self._views[n] if n else None for n in node.outputs]
        return node, kernel, ins, outs, self._ws.get(workspace_id(node))

    def run(self, feeds: Mapping[str, np.ndarray]) -> float:
        """One training step on `feeds` (the model's inputs and the label); returns the loss."""
        self.prepare()
        for name, array in self._check(feeds).items():
            self._views[name][...] = array
        for index, (node, kernel, ins, outs, ws) in enumerate(self._compiled):
            try:
                call(kernel, ins, outs, ws, node.attributes, node.opset)
            except Exception as e:
                raise ExecutionError(
                    f"node {node.name!r} ({node.op_type}) failed: {type(e).__name__}: {e}", node.name
                ) from e
            if index == self._loss_index and not np.all(np.isfinite(self._views[self.step.loss])):
                raise NonFiniteLossError(
                    f"the loss of training step {self.steps_run + 1} is {float(self._views[self.step.loss][0])}; "
                    "no update was applied (lower the learning rate or check the data)",
                    node.name,
                )
        self.steps_run += 1
        return float(self._views[self.step.loss][0])

    def _check(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        graph, wanted = self.step.graph, self.step.data_inputs
        extra = sorted(set(feeds) - set(wanted))
        absent = [n for n in wanted if n not in feeds]
        if extra or absent:
            spec = ", ".join(f"{n!r}: {graph.tensors[n].dtype}{list(graph.tensors[n].shape)}" for n in wanted)
            raise InputError(f"feeds missing {absent} / unknown {extra}; a training step takes {{{spec}}}")
        out = {}
        for n in wanted:
            t, a = graph.tensors[n], np.asarray(feeds[n])
            if a.shape != t.shape:
                raise InputError(f"{n!r} has shape {list(a.shape)}; the training step is bound to {list(t.shape)}")
            if a.dtype.kind != t.dtype.kind:
                raise InputError(f"{n!r} has dtype {a.dtype}; the training step takes {t.dtype}")
            if n == self.step.label and t.dtype.kind == "i":
                classes = graph.tensors[graph.node(self.step.loss_node).inputs[0]].shape[1]
                if a.size and (a.min() < 0 or a.max() >= classes):
                    raise InputError(f"label {n!r} holds class indices outside [0, {classes})")
            out[n] = a
        return out

    def parameters(self) -> dict[str, np.ndarray]:
        """Copies of the current trainable parameters."""
        self.prepare()
        return {w: self._views[w].copy() for w in self.step.trainable}

    def set_parameters(self, values: Mapping[str, np.ndarray]) -> None:
        self.prepare()
        for w, v in values.items():
            if w not in self.step.trainable:
                raise InputError(f"{w!r} is not a trainable parameter of this step: {list(self.step.trainable)}")
            self._views[w][...] = v

    def gradients(self) -> dict[str, np.ndarray]:
        """Copies of the gradients of the last step (a step built with optimizer="none" keeps them)."""
        if self.step.optimizer != "none":
            raise InputError('gradients stay in the arena only for a step built with optimizer="none"')
        return {w: self._views[g].copy() for w, g in self.step.gradients.items()}
