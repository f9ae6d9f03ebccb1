"""Errors the runtime raises for bad models, bad inputs and bad plans.

Every message names the node, tensor, dimension or field at fault and says what would be
accepted, so that a user (or the web service showing the message) can act on it without
a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


class ModelError(ValueError):
    """The model (or how the caller wants it bound) cannot be loaded, planned or run."""


class ExternalDataError(ModelError):
    """An initializer's external data is missing, truncated, or outside the model's folder."""


class ShapeError(ModelError):
    """A tensor's shape or type cannot be made static, or a dimension is left unbound."""


@dataclass(frozen=True)
class UnboundDim:
    """One axis of a graph input that neither a whole shape nor a named dim binds."""

    input: str
    axis: int
    declared: int | str | None  # what the model says there: a negative size, a dim name, or None (unnamed)


ShapeSpelling = Callable[[str, Sequence[int]], str]  # (input, example shape) -> how a face binds a whole shape
DimSpelling = Callable[[str], str]  # dim name -> how a face binds a dim by name


class UnboundDimError(ShapeError):
    """Dims of the graph inputs that nothing binds, each with its input and axis (`unbound`).

    The message names both ways to bind them in the library's spelling (``shapes=``, ``dims=``);
    `describe` spells them the way another face does (the CLI's --shape and --dims, REST fields).
    """

    def __init__(
        self,
        unbound: Sequence[UnboundDim],
        declared: Mapping[str, Sequence[int | str | None]],
        examples: Mapping[str, Sequence[int]],
    ) -> None:
        self.unbound = tuple(unbound)
        self.declared = {name: list(dims) for name, dims in declared.items()}
        self.examples = {name: list(shape) for name, shape in examples.items()}
        super().__init__(
            self.describe(
                lambda name, shape: f"shapes={{{name!r}: {list(shape)}}}", lambda dim: f"dims={{{dim!r}: size}}"
            )
        )

    def describe(self, shape: ShapeSpelling, dim: DimSpelling) -> str:
        parts = []
        for name in dict.fromkeys(u.input for u in self.unbound):
            axes = [u for u in self.unbound if u.input == name]
            listed = ", ".join(f"axis {u.axis} ({_label(u.declared)})" for u in axes)
            by_name = " or ".join(dim(d) for d in dict.fromkeys(u.declared for u in axes) if isinstance(d, str))
            if not by_name:
                how = shape(name, self.examples[name])
            elif all(isinstance(u.declared, str) for u in axes):
                how = f"{shape(name, self.examples[name])} or {by_name}"
            else:  # -1 and unnamed dims have no name to bind them by
                how = f"{shape(name, self.examples[name])} (the named ones also with {by_name})"
            parts.append(
                f"input {name!r} {show_dims(self.declared[name])}: {listed} unbound; bind "
                f"{'it' if len(axes) == 1 else 'them'} with {how}"
            )
        return "; ".join(parts)


def _label(declared: int | str | None) -> str:
    return "unnamed" if declared is None else repr(declared)


def show_dims(dims: Sequence[int | str | None] | None) -> str:
    """Declared dims as a person reads them: sizes, 'names', ? for an unnamed dim."""
    if dims is None:
        return "(no declared shape)"
    return "[" + ", ".join("?" if d is None else repr(d) for d in dims) + "]"


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
