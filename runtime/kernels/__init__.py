"""Kernels: one function per ONNX op type (or small family), found by exact `op_type`.

The contract every kernel keeps (the dispatcher in `runtime.session` relies on it):

* Signature ``fn(*inputs, out, **attributes) -> None``, plus ``ws`` for kernels that
  register a ``workspace`` function.
  - ``inputs`` are numpy arrays in the node's input order; an omitted optional input is
    ``None``. They are read-only views (arena views or constants): never write to them.
  - ``out`` is the preallocated output array (a view into the arena) with the final shape
    and dtype. Kernels registered with ``outputs="many"`` get a tuple instead, with
    ``None`` for optional outputs the node does not use. Kernels write their result
    into ``out`` (``np.add(a, b, out=out)``, ``out[...] = ...``) and never return arrays.
  - ``ws`` is a uint8 array of the size the kernel's ``workspace`` function asked for
    (scratch placed by the planner in the same arena), or ``None`` when it asked for none
    or workspace planning is off. A kernel must then still work, allocating what it needs.
  - Attributes arrive as keyword arguments with the ONNX spec's defaults written in the
    signature: ints, floats, strings (``str``), lists of those, and tensors as numpy arrays.
  - A kernel that needs the node's opset version declares an ``opset`` keyword.
* ``workspace(inputs, outputs, **attributes) -> int``, optional: bytes of scratch the kernel
  needs, from the `TensorMeta` (shape, dtype) of its inputs and outputs.
* A kernel registering a ``constants`` hook also takes ``prepared_weights=False`` in its
  workspace function and its call (`weights_kwargs`), from a problem or session whose
  `runtime.MemoryOptions.prepared_weights` is off (its hook is then never called): it makes no
  transformed copy of a weight, neither beside the arena nor per call in its workspace, and
  takes the route that reads the weight as stored.
* Contracts (shapes, dtypes) are checked once, by the dispatcher, not in every kernel.
* Kernels avoid hidden temporaries: memplan reports bytes numpy allocates outside the
  arena, so a kernel that needs a large temporary declares it as workspace instead.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# Whether compiled loops run in this process (numba, the `fast` extra), and the variable that turns them off.
from runtime.kernels._jit import ENABLED as JIT_ENABLED  # noqa: F401
from runtime.kernels._jit import ENV as JIT_ENV  # noqa: F401
from runtime.kernels._jit import compiled as compiled_loop  # noqa: F401

# For the session's loop (and its tests): small ufunc buffers set once around every step.
from runtime.kernels._scratch import UFUNC_BUFFER as UFUNC_BUFFER
from runtime.kernels._scratch import loop_ufunc_buffers as loop_ufunc_buffers
from runtime.kernels.planes import Planes, plane_wise


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


KernelFn = Callable[..., None]
WorkspaceFn = Callable[..., int]
PrepareFn = Callable[..., None]
ConstantsFn = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Kernel:
    op_type: str
    fn: KernelFn
    workspace: WorkspaceFn | None = None
    multi_output: bool = False
    # Output 0 is a view of input 0 (Reshape, Flatten, Squeeze, ...): the runtime aliases
    # the two buffers and the kernel only has to leave the bytes where they are.
    view: bool = False
    takes_opset: bool = False
    # Inputs output 0 may overwrite (same shape and dtype): the kernel stays correct when
    # `out` is that input's memory, so the runtime may plan it over an input that dies here.
    inplace: tuple[int, ...] = ()
    # Each output plane (batch item, channel) depends on the same plane of input 0 only
    # (when the spec applies): the output may also be smaller than input 0 and start at its
    # first byte (`planes.Planes`).
    planes: Planes | None = None
    # Called once per node when a session prepares, with the workspace function's arguments
    # (tensor metas and attributes): compiles the node's loops (`runtime.kernels._jit`) so that
    # no run compiles, and planning alone never does.
    prepare: PrepareFn | None = None
    # Called once per node when a session prepares, with the values of its inputs that are
    # true constants (None for every other input: activations, shared or trained parameters)
    # and the workspace function's arguments; returns keyword arguments bound into the node's
    # call (a weight transformed once, say). The session counts their bytes as constants.
    constants: ConstantsFn | None = None


_KERNELS: dict[str, Kernel] = {}


def weights_kwargs(kernel: Kernel, prepared_weights: bool) -> dict[str, Any]:
    """What a kernel's workspace function and call take beside the attributes for
    `MemoryOptions.prepared_weights`: ``prepared_weights=False`` when it is off and the kernel
    would transform weights (it has a constants hook), else nothing."""
    return {} if prepared_weights or kernel.constants is None else {"prepared_weights": False}


DEFAULT_DOMAINS = ("", "ai.onnx")
# memplan's own ops: fusions the loader makes (`runtime.fuse`), never read from a model file.
MEMPLAN_DOMAIN = "memplan"


def _key(op_type: str, domain: str) -> str:
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}.{op_type}"


def kernel(
    op_type: str,
    *,
    workspace: WorkspaceFn | None = None,
    outputs: str = "one",
    view: bool = False,
    inplace: tuple[int, ...] = (),
    domain: str = "",
    planes: bool | Planes = False,
    prepare: PrepareFn | None = None,
    constants: ConstantsFn | None = None,
) -> Callable[[KernelFn], KernelFn]:
    """Register `fn` as the kernel of `op_type` (its exact ONNX name) in `domain`; `inplace`
    lists the inputs whose memory output 0 may be when shapes and dtypes match; `planes`
    marks a plane-wise kernel, whose output may be planned over input 0 even when smaller
    (it is then registered wrapped, see `runtime.kernels.planes`); `prepare` is called with
    the workspace function's arguments when a session prepares the node; `constants` (see
    `Kernel.constants`) with the node's constant input values before them."""
    if outputs not in ("one", "many"):
        raise ValueError("outputs must be 'one' or 'many'")
    key = _key(op_type, domain)

    def wrap(fn: KernelFn) -> KernelFn:
        if key in _KERNELS:
            raise ValueError(f"kernel {key!r} registered twice")
        takes_opset = "opset" in inspect.signature(fn).parameters
        run, scratch, spec = fn, workspace, None
        if planes:
            spec = Planes() if planes is True else planes
            run, scratch = plane_wise(fn, workspace, spec)
        _KERNELS[key] = Kernel(
            op_type,
            run,
            scratch,
            outputs == "many",
            view,
            takes_opset,
            tuple(inplace) or ((0,) if spec is not None and not spec.depthwise else ()),
            spec,
            prepare,
            constants,
        )
        return fn

    return wrap


_LOADED: list[bool] = []  # non-empty once every kernel module has been imported


def _load_all() -> None:
    package = importlib.import_module(__name__)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    _LOADED.append(True)


def _registry() -> dict[str, Kernel]:
    # Not "if not _KERNELS": importing one kernel module directly (for its helpers) registers
    # its kernels early, and the registry must still load all the others.
    if not _LOADED:
        _load_all()
    return _KERNELS


def kernels() -> dict[str, Kernel]:
    """Every kernel by key (op type, or "domain.op" outside ONNX's), sorted; a copy."""
    return dict(sorted(_registry().items()))


def get_kernel(op_type: str, domain: str = "") -> Kernel | None:
    # Looked up per node by the planner and the dispatcher: no copy of the registry.
    return _registry().get(_key(op_type, domain))


def kernel_of(node: Any) -> Kernel | None:
    """The kernel of a node (anything with `op_type` and `domain`), or None."""
    return get_kernel(node.op_type, node.domain)


def supported_ops() -> list[str]:
    """The ONNX ops (default domain) that have a kernel."""
    return [key for key in kernels() if "." not in key]


def attributes_of(node: Any) -> dict[str, Any]:
    """A NodeProto's attributes as the keyword arguments kernels take (strings decoded,
    tensors as numpy arrays)."""
    from onnx import helper, numpy_helper

    attrs: dict[str, Any] = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8") for v in value]
        elif hasattr(value, "data_type") and hasattr(value, "dims"):
            value = numpy_helper.to_array(value)
        attrs[a.name] = value
    return attrs


def call(
    k: Kernel, inputs: list[Any], outputs: list[Any], ws: np.ndarray | None, attrs: dict[str, Any], opset: int
) -> None:
    """Run one kernel with the contract above (the dispatcher's single entry point)."""
    extra: dict[str, Any] = {"opset": opset} if k.takes_opset else {}
    if k.workspace is not None:
        extra["ws"] = ws
    out = tuple(outputs) if k.multi_output else outputs[0]
    k.fn(*inputs, out=out, **attrs, **extra)
