"""Errors the runtime raises for bad models, bad inputs and bad plans.

Every message names the node, tensor, dimension or field at fault and says what would be
accepted, so that a user (or the web service showing the message) can act on it without
a traceback.
"""

from __future__ import annotations


class ModelError(ValueError):
    """The model (or how the caller wants it bound) cannot be loaded, planned or run."""


class ExternalDataError(ModelError):
    """An initializer's external data is missing, truncated, or outside the model's folder."""


class ShapeError(ModelError):
    """A tensor's shape or type cannot be made static, or a dimension is left unbound."""


class TensorTooLargeError(ModelError):
    """A tensor (or the arena) would exceed the configured byte limit; nothing was allocated."""


class UnsupportedOpError(ModelError):
    """The model uses ops memplan has no kernel for; every one of them is listed."""

    def __init__(self, message: str, ops: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.ops = ops or {}  # op type -> names of the nodes that use it


class FeedError(ModelError):
    """The arrays given to `Session.run` (or bound to, or written for, the model's inputs and
    outputs) do not match them: a name, shape or dtype is wrong, or one is missing."""


class PlanError(ModelError):
    """A plan does not fit the model's memory problem; the session refuses to run it."""


class CanaryError(RuntimeError):
    """A step changed bytes of a live tensor it does not own: the plan corrupts data.

    `clobbered` maps each damaged tensor to the bytes of it that the step's own outputs cover
    (first arena byte, end, count); a count of 0 means the step wrote there through scratch.
    """

    def __init__(
        self,
        message: str,
        step: int,
        node: str,
        tensors: list[str],
        clobbered: dict[str, tuple[int, int, int]] | None = None,
    ) -> None:
        super().__init__(message)
        self.step = step
        self.node = node
        self.tensors = tensors
        self.clobbered = clobbered or {}


class ExecutionError(RuntimeError):
    """A kernel failed while running a node; the message names the node and its op type."""

    def __init__(self, message: str, node: str) -> None:
        super().__init__(message)
        self.node = node
