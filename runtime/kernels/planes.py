"""Running a plane-wise kernel with its output over its own input.

A kernel is *plane-wise* when each plane of its output (one batch item, one channel: the
last dims) depends only on the same plane of input 0: pooling, and a depthwise
convolution (one filter per channel). Its output may then start at input 0's first byte
even when it is smaller, which the planner uses to plan such a step without a second
buffer: planes are taken in order, a chunk of channels at a time, computed into scratch
and copied into place. Output plane j ends at byte (j + 1) * P_out <= (j + 1) * P_in, so
it only overwrites input planes already read.

A kernel that itself reads each block of input planes before it writes the same block's
output planes (`Planes.direct`: a depthwise Conv on its banded or im2col route) is instead
called on the memory as it is, one batch item at a time: no chunk scratch and no copy.

A kernel may also declare that it writes its output over input 0 by a route of its own
even where the op is not plane-wise (`Planes.over`: a dense Conv, pixel-wise or row-lagged,
`runtime.kernels.conv.over`, whose output may be larger than its input); it is then called
on the memory as it is, and picks that route itself.

`Planes` says how a kernel is plane-wise; `plane_wise(fn, workspace, spec, bind)` returns the
kernel function, the workspace function and the bind hook to register (the scratch for one
chunk of output planes is added after the kernel's own, only where the spec applies; the
kernel's own `bind` is given the plane-wise call decided for the node's shapes as its general call).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.kernels._scratch import same_start, units_within
from runtime.kernels.protocol import BindFn, BindHook, Bound

# Bytes of output planes computed per chunk (at least one plane): the scratch the planner
# adds for the chunk, small beside the tensors pooled.
CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True)
class Planes:
    """How a kernel is plane-wise.

    `channel_inputs`: inputs with one entry per channel along their axis 0 (a depthwise
    filter and bias), sliced with the chunk. `depthwise`: plane-wise only when ``group``
    equals the channels in and out and each filter sees one channel; a chunk then runs as
    a depthwise op of its own channel count.
    """

    channel_inputs: tuple[int, ...] = ()
    depthwise: bool = False
    # (attrs, inputs, out) -> whether the kernel, given its output over input 0 for one batch
    # item, reads every block of input planes before writing that block's output planes.
    direct: Callable[[dict[str, Any], Sequence[Any], Any], bool] | None = None
    # (attrs, inputs, out) -> whether the kernel, called with its output starting at input 0's
    # first byte (of any size), computes the op correctly by a route of its own.
    over: Callable[[dict[str, Any], Sequence[Any], Any], bool] | None = None

    def applies(self, attrs: dict[str, Any], inputs: Sequence[Any], out: Any) -> bool:
        """Whether the op, with these attributes and input/output shapes, is plane-wise."""
        if not self.depthwise:
            return True
        x, w = inputs[0], inputs[1] if len(inputs) > 1 else None
        if x is None or w is None or out is None or len(x.shape) < 3:
            return False
        group = attrs.get("group", 1)
        return group == x.shape[1] == out.shape[1] == w.shape[0] and w.shape[1] == 1

    def overlaps(self, attrs: dict[str, Any], inputs: Sequence[Any], out: Any) -> bool:
        """Whether the kernel may write this op's output from input 0's first byte by its own
        route (`over`), whatever the output's size."""
        return self.over is not None and out is not None and bool(self.over(attrs, inputs, out))

    def chunked(self, attrs: dict[str, Any], inputs: Sequence[Any], out: Any) -> bool:
        """Whether the op is plane-wise through a chunk of scratch (plane-wise, not `direct`)."""
        if not self.applies(attrs, inputs, out):
            return False
        return self.direct is None or not self.direct(attrs, inputs, out)


def _chunk_bytes(out_shape: tuple[int, ...], itemsize: int) -> int:
    """Scratch bytes for one chunk of output planes."""
    plane = math.prod(out_shape[2:]) * itemsize
    return units_within(CHUNK_BYTES, plane, out_shape[1]) * plane


def plane_wise(
    fn: Callable[..., None], workspace: Callable[..., int] | None, spec: Planes, bind: BindHook | None = None
) -> tuple[Any, Any, BindFn]:
    """The kernel wrapped to allow its output over input 0, its workspace function and its bind."""

    def with_chunk(inputs: list[Any], outputs: list[Any], **attrs: Any) -> int:
        own = int(workspace(inputs, outputs, **attrs)) if workspace is not None else 0
        out = outputs[0]
        if out is None or not spec.chunked(attrs, inputs, out):
            return own
        return own + _chunk_bytes(tuple(out.shape), out.dtype.itemsize)

    wrapped = PlaneWise(fn, spec, workspace is not None, bind)
    return wrapped, with_chunk, wrapped.bind


class PlaneWise:
    """A plane-wise kernel function, callable as the kernel itself. Each call works out whether
    the op is plane-wise here and through which path; `bind` works it out once for fixed shapes
    and attributes (at a session's prepare) and returns the call that skips it, or the kernel's
    own bound call (its `hook`)."""

    def __init__(self, fn: Callable[..., None], spec: Planes, takes_ws: bool, hook: BindHook | None = None) -> None:
        functools.update_wrapper(self, fn)
        self.fn, self.spec, self.takes_ws, self.hook = fn, spec, takes_ws, hook

    def __call__(self, *inputs: Any, out: Any, ws: np.ndarray | None = None, **attrs: Any) -> None:
        y = out[0] if isinstance(out, tuple) else out
        self._run(inputs, out, ws, attrs, self._decide(attrs, inputs, y))

    def bind(self, inputs: Sequence[Any], outputs: Sequence[Any], attrs: dict[str, Any]) -> Bound:
        """The call for inputs and outputs of these shapes (anything with `shape` and `dtype`)
        and these attributes."""
        decision = self._decide(attrs, inputs, outputs[0] if outputs else None)

        def bound(*inputs: Any, out: Any, ws: np.ndarray | None = None, **attrs: Any) -> None:
            self._run(inputs, out, ws, attrs, decision)

        # The kernel's own bound call for these shapes, given `general(inputs, out, ws, attrs)`
        # (`bound`'s work, the attributes passed as one dict) for arrays it was not bound for. A
        # plane-wise kernel binding its own call takes its output over its input on itself (a
        # depthwise Conv's route reads each plane before writing it, GlobalAveragePool writes
        # each mean past the planes read), or leaves that call to `general`, the chunks.
        own = (
            None
            if self.hook is None
            else self.hook(inputs, outputs, attrs, functools.partial(self._run, decision=decision))
        )
        return own or Bound(bound, takes_attributes=True)

    def _decide(self, attrs: dict[str, Any], inputs: Sequence[Any], y: Any) -> tuple[bool, bool, int, bool]:
        """(plane-wise, direct, bytes of the chunk at the end of the workspace, over)."""
        plane_wise = y is not None and self.spec.applies(attrs, inputs, y)
        direct = plane_wise and self.spec.direct is not None and self.spec.direct(attrs, inputs, y)
        chunk = _chunk_bytes(tuple(y.shape), y.dtype.itemsize) if plane_wise and not direct else 0
        over = not plane_wise and self.spec.overlaps(attrs, inputs, y)
        return plane_wise, direct, chunk, over

    def _run(
        self,
        inputs: Sequence[Any],
        out: Any,
        ws: np.ndarray | None,
        attrs: dict[str, Any],
        decision: tuple[bool, bool, int, bool],
    ) -> None:
        fn, (plane_wise, direct, chunk, over) = self.fn, decision
        y = out[0] if isinstance(out, tuple) else out
        x = inputs[0]
        own = ws if ws is None or not chunk else ws[: ws.size - chunk]
        extra = {"ws": own} if self.takes_ws else {}
        if y is None or x is None or not np.may_share_memory(x, y):
            fn(*inputs, out=out, **extra, **attrs)
            return
        if over and same_start(x, y) and not isinstance(out, tuple):
            fn(*inputs, out=out, **extra, **attrs)  # its own route over the input (`Planes.over`)
            return
        if not plane_wise:
            raise ValueError(
                "output over input 0 needs a plane-wise op, or one whose kernel writes over its input "
                f"from its first byte; got {x.shape} -> {y.shape} with {attrs}"
            )
        if isinstance(out, tuple) and any(o is not None for o in out[1:]):
            raise ValueError("plane-wise in place needs output 0 alone (the other outputs are not planes)")
        _check_over(x, y)
        if direct:
            # Item i's output ends at byte (i + 1) * C * P_out <= (i + 1) * C * P_in: it only
            # overwrites items already read, and within the item the kernel keeps block order.
            for item in range(y.shape[0]):
                part = y[item : item + 1]
                item_out = (part, *(None for _ in out[1:])) if isinstance(out, tuple) else part
                fn(x[item : item + 1], *inputs[1:], out=item_out, **extra, **attrs)
            return
        scratch = (
            ws[ws.size - chunk :].view(y.dtype) if ws is not None else np.empty(chunk // y.dtype.itemsize, y.dtype)
        )
        _in_place(fn, self.spec, inputs, out, y, scratch, extra, attrs)


def _check_over(x: np.ndarray, y: np.ndarray) -> None:
    larger = math.prod(y.shape[2:]) * y.itemsize > math.prod(x.shape[2:]) * x.itemsize
    if x.shape[:2] != y.shape[:2] or larger or not (x.flags.c_contiguous and y.flags.c_contiguous):
        raise ValueError(
            f"plane-wise in place needs matching, contiguous planes no larger than the input's; got {x.shape} -> {y.shape}"
        )
    if not same_start(x, y):
        raise ValueError("plane-wise in place needs the output to start at the input's first byte")


def _in_place(
    fn: Callable[..., None],
    spec: Planes,
    inputs: Sequence[Any],
    out: Any,
    y: np.ndarray,
    scratch: np.ndarray,
    extra: dict[str, Any],
    attrs: dict[str, Any],
) -> None:
    x = inputs[0]
    n, c = y.shape[0], y.shape[1]
    plane = math.prod(y.shape[2:])
    per_chunk = max(1, scratch.size // max(1, plane))
    for item in range(n):
        for start in range(0, c, per_chunk):
            k = min(per_chunk, c - start)
            args = list(inputs)
            args[0] = x[item : item + 1, start : start + k]
            for i in spec.channel_inputs:
                if i < len(args) and args[i] is not None:
                    args[i] = args[i][start : start + k]
            chunk_attrs = {**attrs, "group": k} if spec.depthwise else attrs
            target = scratch[: k * plane].reshape(1, k, *y.shape[2:])
            chunk_out = (target, *(None for _ in out[1:])) if isinstance(out, tuple) else target
            fn(*args, out=chunk_out, **extra, **chunk_attrs)
            # Ends at plane (item, start + k): no input plane after the ones just read.
            y[item, start : start + k] = target[0]
