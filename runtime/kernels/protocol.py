"""The values of the kernel protocol that its hooks return, and the shapes of those hooks.

A kernel's `bind` hook runs once per node when a session prepares (and once per call of the
one-shot `runtime.kernels.call`), with the node's input and output metas (anything with
``shape`` and ``dtype``), its attributes and the kernel's general call for those shapes; it
returns a `Bound` (what it worked out once, as TensorFlow Lite Micro's Prepare fills a node's
OpData and its Eval only reads it), or None where the general call is the one to run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

KernelFn = Callable[..., None]
# The kernel's general call for the shapes being bound: (inputs, out, ws, attributes), the
# attributes as one dict (a plane-wise kernel's is the plane-wise route decided for them).
GeneralFn = Callable[[Sequence[Any], Any, Any, dict[str, Any]], None]
# What a kernel registers: (input metas, output metas, attributes, general call) -> Bound or None.
BindHook = Callable[[Sequence[Any], Sequence[Any], dict[str, Any], GeneralFn], "Bound | None"]
# What the dispatcher calls: the registered hook with the general call already given.
BindFn = Callable[[Sequence[Any], Sequence[Any], dict[str, Any]], "Bound | None"]


@dataclass(frozen=True)
class Bound:
    """A node's call made once by its kernel's `bind` hook.

    `run` is called as ``run(*inputs, out=..., ws=..., opset=...)`` (``ws`` when the kernel
    declares a workspace, ``opset`` when it takes one); with `takes_attributes` it also gets
    the node's attributes and prepared constants as keyword arguments, else it bound what it
    needs of them. `prime`, with run's arguments, makes at prepare what the call derives from
    the step's arrays (`runtime.kernels.same_arrays`), so that no run allocates it.
    """

    run: KernelFn
    takes_attributes: bool = False
    prime: KernelFn | None = None
