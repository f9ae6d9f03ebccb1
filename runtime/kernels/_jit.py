"""Compiled loops for the kernels numpy cannot run in one pass over memory.

numba (the optional ``fast`` extra) compiles the inner loops of a few kernels to machine code:
a depthwise convolution with its activation, a recurrent cell's step, a normalisation's two
passes. Without numba, or with ``MEMPLAN_JIT=0`` in the environment (the switch is
`planner.jit`'s, shared with the planner's compiled queries), every kernel takes its numpy
route; both routes are tested against the same oracles.

What a compiled loop may do:

- write only into the arrays it is given (arena views, the kernel's workspace) and allocate
  nothing, so that every byte stays in the arena (numba's own allocations would not even
  show in the traced outside-arena count);
- run on the calling thread only (the executor's timings are single-threaded);
- keep IEEE semantics for NaN and infinities: the fast-math flags below allow reassociation
  and contraction (vectorised sums, fused multiply-adds), not assuming finite values.

Loops are compiled on their first call with a given signature (kernels call theirs when a
session prepares) and cached on disk, beside the module or in the user's cache folder, so a
process pays the compilation once per machine, not once per run; where no folder is
writable, each process compiles its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from planner.jit import ENABLED as ENABLED
from planner.jit import ENV as ENV
from planner.jit import compiled as _compiled
from planner.jit import enabled as enabled
from planner.jit import numba as numba

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}  # no "nnan"/"ninf": NaN and inf propagate

F = TypeVar("F", bound=Callable[..., Any])


def compiled(fn: F, *, inline: bool = False) -> F | None:
    """`fn` compiled by numba when compiled loops are enabled, else None (the caller keeps its
    numpy route). `fn` must follow the rules in this module's docstring. With `inline`, `fn` is
    a helper inlined into the compiled loops that call it (a scalar formula, say)."""
    options: dict[str, Any] = {"fastmath": FASTMATH, "error_model": "numpy"}
    if inline:
        options["inline"] = "always"
    return _compiled(fn, **options)


float32_of_bits: Any = None  # compiled code only
float64_of_bits: Any = None
if ENABLED:
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    def _bit_cast(result: Any, bits: Any, llvm_type: Any) -> Any:
        """An intrinsic taking `bits` (its argument converted to that integer type) to the
        float of the same IEEE bits: a cast the compiler vectorises, to build powers of two
        from exponent bits."""

        @intrinsic
        def cast(typingctx, value):  # type: ignore[no-untyped-def]
            def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
                return builder.bitcast(args[0], llvm_type)

            return result(bits), codegen

        return cast

    float32_of_bits = _bit_cast(types.float32, types.int32, ir.FloatType())
    float64_of_bits = _bit_cast(types.float64, types.int64, ir.DoubleType())
