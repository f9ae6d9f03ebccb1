"""Running training steps inside one planned arena, through the one executor (`runtime.Session`).

`TrainingSession(step, "greedy_by_size").prepare()` hands `runtime.Session` the step's graph
and its prebuilt problem `training_problem(step)`, planned with the strategy (or taken as the
Plan given for it); the session refuses a plan `planner.check_plan` rejects, allocates one
aligned arena and binds every tensor as a view at its planned offset. The initial parameters
and optimizer state are written there once, through the session's own input buffers.
`run(feeds)` copies the batch and its labels in, runs every step of the schedule, and returns
the loss. Parameters and optimizer state never leave the arena between steps: their updates
write their own bytes, and every output is read in place (no copy per step).

With ``canary=True`` the session's canary checks every node of every step: a node that writes
over a live tensor's bytes stops the step with `runtime.CanaryError` naming its step and tensors
(a plan the checker would refuse is then run, to show where it corrupts data).

A loss that is not finite stops the step right after the loss node (the session's
``after_node`` hook), before any backward op or update runs, so parameters and optimizer state
keep the values they had (NonFiniteLossError).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import numpy as np

import planner
from planner import Plan, Problem
from runtime.errors import ExecutionError, FeedError
from runtime.options import MemoryOptions
from runtime.session import OnStep, Session
from runtime.training.build import TrainingStep
from runtime.training.plans import training_problem


class NonFiniteLossError(ExecutionError):
    """The loss of a step is NaN or infinite; no update of that step was applied."""


class TrainingSession:
    """Run `step` repeatedly inside the arena of `plan` (a Plan for `training_problem(step)` or a strategy name)."""

    def __init__(
        self,
        step: TrainingStep,
        plan: Plan | str = planner.DEFAULT_STRATEGY,
        options: MemoryOptions | None = None,
        canary: bool = False,
    ):
        self.step = step
        self.problem: Problem = training_problem(step, options)
        self.steps_run = 0
        self.session = Session(
            step.graph,
            plan,
            options,
            problem=self.problem,
            after_node={step.loss_node: self._check_loss},
            measure="time",  # a training loop runs many steps: no tracemalloc around each
            max_arena_bytes=sys.maxsize,  # the step's arena is what it is; nothing refuses it
            canary=canary,  # free bytes poisoned, every live tensor checked after each node (CanaryError)
            check=not canary,  # with the canary, a plan the checker refuses runs until the step it corrupts
        )
        self._prepared = False

    @property
    def plan(self) -> Plan | None:
        return self.session.plan

    @property
    def arena(self) -> np.ndarray | None:
        return self.session.arena

    def prepare(self) -> TrainingSession:
        if self._prepared:
            return self
        session = self.session.prepare()
        for name, value in self.step.state.items():
            session.input_buffer(name)[...] = value
        # Read in place: the loss, the updated state and (optimizer "none") the gradients.
        self._outputs = {name: session.output_buffer(name) for name in self.step.graph.outputs}
        self._prepared = True
        return self

    def _check_loss(self) -> None:
        loss = self._outputs[self.step.loss]
        if not np.all(np.isfinite(loss)):
            raise NonFiniteLossError(
                f"the loss of training step {self.steps_run + 1} is {float(loss[0])}; "
                "no update was applied (lower the learning rate or check the data)",
                self.step.loss_node,
            )

    def run(self, feeds: Mapping[str, np.ndarray], on_step: OnStep | None = None) -> float:
        """One training step on `feeds` (the model's inputs and the label); returns the loss.
        `on_step` is called after each node of the step, as `Session.run` does."""
        self.prepare()
        self.session.run(self._check(feeds), on_step=on_step)
        self.steps_run += 1
        return float(self._outputs[self.step.loss][0])

    def _check(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        graph, wanted = self.step.graph, self.step.data_inputs
        extra = sorted(set(feeds) - set(wanted))
        absent = [n for n in wanted if n not in feeds]
        if extra or absent:
            spec = ", ".join(f"{n!r}: {graph.tensors[n].dtype}{list(graph.tensors[n].shape)}" for n in wanted)
            raise FeedError(f"feeds missing {absent} / unknown {extra}; a training step takes {{{spec}}}")
        out = {}
        for n in wanted:
            t, a = graph.tensors[n], np.asarray(feeds[n])
            if a.shape != t.shape:
                raise FeedError(f"{n!r} has shape {list(a.shape)}; the training step is bound to {list(t.shape)}")
            if a.dtype.kind != t.dtype.kind:
                raise FeedError(f"{n!r} has dtype {a.dtype}; the training step takes {t.dtype}")
            if n == self.step.label and t.dtype.kind == "i":
                classes = graph.tensors[graph.node(self.step.loss_node).inputs[0]].shape[1]
                if a.size and (a.min() < 0 or a.max() >= classes):
                    raise FeedError(f"label {n!r} holds class indices outside [0, {classes})")
            out[n] = a
        return out

    def parameters(self) -> dict[str, np.ndarray]:
        """Copies of the current trainable parameters."""
        self.prepare()
        return {w: self.session.input_buffer(w).copy() for w in self.step.trainable}

    def set_parameters(self, values: Mapping[str, np.ndarray]) -> None:
        self.prepare()
        for w, v in values.items():
            if w not in self.step.trainable:
                raise FeedError(f"{w!r} is not a trainable parameter of this step: {list(self.step.trainable)}")
            self.session.input_buffer(w)[...] = v

    def gradients(self) -> dict[str, np.ndarray]:
        """Copies of the gradients of the last step (a step built with optimizer="none" keeps them)."""
        if self.step.optimizer != "none":
            raise FeedError('gradients stay in the arena only for a step built with optimizer="none"')
        return {w: self._outputs[g].copy() for w, g in self.step.gradients.items()}
