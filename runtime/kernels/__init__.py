"""Kernels: one function per ONNX op type (or small family), found by exact `op_type`.

A kernel is one declared `Kernel` value, registered by `kernel`; every hook it has is a field
of that value (run, workspace, prepare, constants, planes, in-place inputs, bind), never an
attribute set on a function. The contract every kernel keeps:

* Run: ``fn(*inputs, out, **attributes) -> None``, plus ``ws`` for kernels that register a
  ``workspace`` function.
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
* ``bind``, optional (`runtime.kernels.protocol`): once per node at prepare, the call for the
  node's shapes and attributes, worked out once (a `Bound`).
* A kernel registering a ``constants`` hook also takes ``prepared_weights=False`` in its
  workspace function and its call (`weights_kwargs`), from a problem or session whose
  `runtime.MemoryOptions.prepared_weights` is off (its hook is then never called): it makes no
  transformed copy of a weight, neither beside the arena nor per call in its workspace, and
  takes the route that reads the weight as stored.
* One dispatcher, `bound_call`, turns a kernel and a node's metas into the call to make: a
  session binds each step through it once (`runtime.step_calls`), and `call`, the one-shot
  form for arrays (constant folding, the kernel tests), goes through it too. Shapes and dtypes
  are fixed before it (shape inference at load, the plan's views), not checked in each kernel.
* Kernels avoid hidden temporaries: memplan reports bytes numpy allocates outside the
  arena, so a kernel that needs a large temporary declares it as workspace instead.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Whether compiled loops run in this process (numba, the `fast` extra), and the variable that turns them off.
from runtime.kernels._jit import ENABLED as JIT_ENABLED  # noqa: F401
from runtime.kernels._jit import ENV as JIT_ENV  # noqa: F401
from runtime.kernels._jit import compiled as compiled_loop  # noqa: F401

# For the session's loop (and its tests): small ufunc buffers set once around every step, and
# the scratch its kernels share beside the arena (`shared_scratch`) with its bytes.
from runtime.kernels._scratch import UFUNC_BUFFER as UFUNC_BUFFER
from runtime.kernels._scratch import loop_ufunc_buffers as loop_ufunc_buffers
from runtime.kernels._scratch import shared_scratch as shared_scratch
from runtime.kernels._scratch import shared_scratch_held as shared_scratch_held
from runtime.kernels.planes import Planes, plane_wise
from runtime.kernels.protocol import BindFn, BindHook, Bound, KernelFn


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


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
    # Output 0 may also be narrower than input 0, in place from its first byte: same shape, as
    # many or fewer bytes per element (QuantizeLinear's int8 over its float32 input). The kernel
    # writes output element i only once it has read input elements 0..i (a forward pass, or
    # forward chunks each read before written), so no byte is overwritten before it is read.
    narrowing: bool = False
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
    # Called once per node when a session prepares, with the node's input and output metas and
    # its attributes: the call worked out once for them (`runtime.kernels.protocol.Bound`), or
    # None for the general call. A plane-wise kernel's decides its plane-wise route here too.
    bind: BindFn | None = None

    @property
    def run(self) -> KernelFn:
        """The kernel's general call (`fn`)."""
        return self.fn


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
    narrowing: bool = False,
    domain: str = "",
    planes: bool | Planes = False,
    prepare: PrepareFn | None = None,
    constants: ConstantsFn | None = None,
    bind: BindHook | None = None,
) -> Callable[[KernelFn], KernelFn]:
    """Register `fn` as the kernel of `op_type` (its exact ONNX name) in `domain`; `inplace`
    lists the inputs whose memory output 0 may be when shapes and dtypes match (`narrowing`: or
    from input 0's first byte with a narrower dtype, see `Kernel.narrowing`); `planes`
    marks a plane-wise kernel, whose output may be planned over input 0 even when smaller
    (it is then registered wrapped, see `runtime.kernels.planes`); `prepare` is called with
    the workspace function's arguments when a session prepares the node; `constants` (see
    `Kernel.constants`) with the node's constant input values before them; `bind` (see
    `runtime.kernels.protocol`) with the node's metas, attributes and general call."""
    if outputs not in ("one", "many"):
        raise ValueError("outputs must be 'one' or 'many'")
    key = _key(op_type, domain)

    def wrap(fn: KernelFn) -> KernelFn:
        if key in _KERNELS:
            raise ValueError(f"kernel {key!r} registered twice")
        takes_opset = "opset" in inspect.signature(fn).parameters
        run, scratch, spec, binder = fn, workspace, None, _plain_bind(fn, workspace is not None, bind)
        if planes:
            spec = Planes() if planes is True else planes
            run, scratch, binder = plane_wise(fn, workspace, spec, bind)
        _KERNELS[key] = Kernel(
            op_type,
            run,
            scratch,
            outputs == "many",
            view,
            takes_opset,
            tuple(inplace) or ((0,) if spec is not None and not spec.depthwise else ()),
            narrowing,
            spec,
            prepare,
            constants,
            binder,
        )
        return fn

    return wrap


def _plain_bind(fn: KernelFn, takes_ws: bool, hook: BindHook | None) -> BindFn | None:
    """The dispatcher's `bind` of a kernel that is not plane-wise: `hook` given `fn` as the general call."""
    if hook is None:
        return None

    def general(inputs: Any, out: Any, ws: Any, attrs: dict[str, Any]) -> None:
        fn(*inputs, out=out, **({"ws": ws} if takes_ws else {}), **attrs)

    def bind(inputs: Any, outputs: Any, attrs: dict[str, Any]) -> Bound | None:
        return hook(inputs, outputs, attrs, general)

    return bind


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


def bound_call(
    k: Kernel, inputs: Sequence[Any], outputs: Sequence[Any], attrs: dict[str, Any], constants: dict[str, Any],
    opset: int, ws: np.ndarray | None,
) -> tuple[KernelFn, dict[str, Any], KernelFn | None]:  # fmt: skip
    """The dispatcher: (function, keyword arguments, prime) of a node's call with inputs and outputs of
    these metas (anything with ``shape`` and ``dtype``; None for an omitted one), its attributes,
    the keyword arguments bound into it (`Kernel.constants`' values, `weights_kwargs`), its opset
    and its workspace. The function is called as ``fn(*inputs, out=out, **kwargs)``, `out` a
    tuple for a kernel with many outputs; `prime`, with the same arguments, at prepare."""
    made = k.bind(inputs, outputs, attrs) if k.bind is not None else None
    if made is None:
        made = Bound(k.fn, takes_attributes=True)
    kwargs = dict(attrs) | constants if made.takes_attributes else {}
    if k.takes_opset:
        kwargs["opset"] = opset
    if k.workspace is not None:
        kwargs["ws"] = ws
    return made.run, kwargs, made.prime


def call(
    k: Kernel, inputs: list[Any], outputs: list[Any], ws: np.ndarray | None, attrs: dict[str, Any], opset: int
) -> None:
    """Run one kernel once on arrays, through the dispatcher (`bound_call`) a session binds its steps with."""
    metas_in = [None if a is None else TensorMeta(tuple(a.shape), a.dtype) for a in inputs]
    metas_out = [None if a is None else TensorMeta(tuple(a.shape), a.dtype) for a in outputs]
    fn, kwargs, _ = bound_call(k, metas_in, metas_out, attrs, {}, opset, ws)
    fn(*inputs, out=tuple(outputs) if k.multi_output else outputs[0], **kwargs)
