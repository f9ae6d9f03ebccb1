"""What every `memplan` command shares: exit codes, one-line errors, and the option definitions
(strategy, input shapes and dims, and the memory switches) so that `plan`, `run`, `sweep`,
`train-plan` and `train` spell them alike.

Every command turns a bad input into one line on stderr naming what was wrong and what is
accepted, and exits with status 2; a plan that does not fit exits with status 1. No
traceback reaches the user (set MEMPLAN_DEBUG=1 to see one).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import wraps
from typing import Annotated, Any, TypeVar

import typer

from runtime import DEFAULT_ALIGNMENT, MemoryOptions, UnboundDimError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    typer.echo(f"memplan: error: {message}", err=True)
    return typer.Exit(code)


def user_errors(fn: F) -> F:
    """Report expected errors as one line and exit 2, unexpected ones as one line and exit 3."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from planner import PlanningError

        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except UnboundDimError as e:
            if os.environ.get("MEMPLAN_DEBUG"):
                raise
            raise fail(e.describe(shape_flag, lambda dim: f"--dims {dim}=value")) from None
        except (PlanningError, ValueError, OSError, KeyError) as e:
            if os.environ.get("MEMPLAN_DEBUG"):
                raise
            raise fail(str(e).strip("'\"") or type(e).__name__) from None
        except MemoryError:
            raise fail("out of memory; try smaller --dims or a lower --time-limit") from None
        except Exception as e:  # a bug: say so in one line, keep the traceback for MEMPLAN_DEBUG
            if os.environ.get("MEMPLAN_DEBUG"):
                raise
            raise fail(
                f"internal error ({type(e).__name__}: {e}); rerun with MEMPLAN_DEBUG=1 for details", EXIT_INTERNAL
            ) from None

    return wrapper  # type: ignore[return-value]


def shape_flag(name: str, sizes: Any) -> str:
    """How the command line binds a whole input shape: --shape x=1x3x640x640."""
    return f"--shape {name}={'x'.join(str(d) for d in sizes)}"


def strategy_help() -> str:
    from planner import names

    return "Strategy name, a comma-separated list, or 'all'. Known: " + ", ".join(names()) + "."


def on(flag: str, value: str) -> bool:
    """An on|off switch's value; anything else is refused naming the flag."""
    if value not in ("on", "off"):
        raise fail(f"{flag} takes on|off, got {value!r}")
    return value == "on"


# ---- options shared by the commands that load a model ---------------------------------------------

DimsOption = Annotated[str | None, typer.Option(help="Symbolic dims of a model, e.g. batch=8,seq=128.")]
ShapeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--shape",
        help="A whole input shape, NAME=1x3x48x320 (repeatable): binds every axis of that input, whatever the "
        "model declares (-1, 0, '?'); --dims binds the others.",
    ),
]
IoOption = Annotated[str, typer.Option(help="Model inputs/outputs: 'arena' (planned) or 'external' (caller's memory).")]
AlignmentOption = Annotated[int | None, typer.Option(help=f"Offset alignment in bytes (default {DEFAULT_ALIGNMENT}).")]
WorkspaceSwitch = Annotated[str, typer.Option(help="Plan kernel scratch in the arena: on|off.")]
InplaceSwitch = Annotated[
    str,
    typer.Option(help="Ops write over an input that dies there (elementwise, LRN, pooling, depthwise Conv): on|off."),
]
ConcatSwitch = Annotated[str, typer.Option(help="Concat's producers write straight into their slices: on|off.")]
FuseSwitch = Annotated[
    str,
    typer.Option(
        help=(
            "Fuse BatchNorm into Conv, a 1x1 Conv with its residual Add, the exact GELU, a Conv with its "
            "activation, a squeeze-and-excitation block: on|off."
        )
    ),
]
PreparedWeightsSwitch = Annotated[
    str,
    typer.Option(
        help=(
            "Kernels keep transformed copies of constant weights beside the arena (Winograd's, RNNs' panels) "
            "and may transform weights per call in their scratch; off reads weights as stored (fewer parameter "
            "bytes, slower): on|off."
        )
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
TileOption = Annotated[
    str,
    typer.Option(
        "--tile",
        help="auto: compute the first layers of a CNN in row bands (stripes or patches), or a transformer's "
        "attention in blocks of query rows, when that lowers the planned arena, the planner's choice of split "
        "point, band height and method; off: as the model is.",
    ),
]
TileOverheadOption = Annotated[
    float,
    typer.Option(
        "--tile-overhead",
        help="Extra multiply-accumulates --tile auto may add, a fraction of the model's (a number >= 0).",
    ),
]
TileSlackOption = Annotated[
    float,
    typer.Option(
        "--tile-slack",
        help="Arena above the smallest tiled one --tile auto may trade for fewer bands (faster runs), a fraction "
        "of it (a number >= 0; 0: the smallest arena).",
    ),
]


def memory_options(
    *,
    io: str,
    workspace: str,
    alignment: int | None,
    inplace: str,
    concat_inplace: str,
    fuse: str,
    prepared_weights: str = "on",
) -> MemoryOptions:
    """The switches as one `runtime.MemoryOptions`; a bad value is refused naming its flag."""
    if io not in ("arena", "external"):
        raise fail(f"--io must be 'arena' or 'external', got {io!r}")
    step = step_memory_options(workspace=workspace, alignment=alignment, prepared_weights=prepared_weights)
    return step.replace(
        io=io,
        inplace=on("--inplace", inplace),
        concat_inplace=on("--concat-inplace", concat_inplace),
        fuse=on("--fuse", fuse),
    )


def step_memory_options(*, workspace: str, alignment: int | None, prepared_weights: str) -> MemoryOptions:
    """The switches of every command that plans or runs a step, a training step included
    (--alignment, --workspace, --prepared-weights), as a `runtime.MemoryOptions` with the other
    fields at their defaults; a bad value is refused naming its flag."""
    if alignment is not None and alignment < 1:
        raise fail(f"--alignment must be a positive number of bytes, got {alignment}")
    return MemoryOptions(
        workspace=on("--workspace", workspace),
        alignment=alignment or DEFAULT_ALIGNMENT,
        prepared_weights=on("--prepared-weights", prepared_weights),
    )
