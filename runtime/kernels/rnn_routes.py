"""The recurrences' routes (LSTM, GRU, RNN), one table of values (`ROUTES`, each a `RecurrenceRoute`:
name, when it applies, its workspace, its run, its bound call, its prepare, the loops it runs) and
one choice per shape and dtypes (`RecurrenceCase.chosen`): the workspace function the planner calls,
the prepare hook, the call and the bound call of `runtime.kernels.rnn` all read that one route
object, never its name.

"compiled": float32 operands, integer sequence lengths, at most `jit_rnn.MAX_BATCH` batch entries,
compiled loops on: each direction's recurrence is one compiled call (`runtime.kernels.jit_rnn`),
its arguments worked out once per set of arrays (`runtime.kernels.rnn_plan`); arrays the loop does
not take at a call (a strided R) run by the numpy route. "numpy": everything else
(`runtime.kernels.rnn_numpy`). Both take the same workspace (`rnn_plan.workspace`).

`EXAMPLES` holds small cases per route: the route test runs each with exactly its declared
workspace, and `memplan warm` runs the compiled ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from runtime.kernels import jit_rnn, rnn_numpy, rnn_plan
from runtime.kernels.protocol import Bound

GATES = rnn_plan.GATES  # gate blocks per hidden unit, by op
_LOOPS = {"GRU": "gru_loop", "LSTM": "lstm_loop", "RNN": "rnn_loop"}


class RecurrenceCase(NamedTuple):
    """A recurrent node's op, batch and operand dtypes as one hashable value: what its route depends on."""

    op: str
    batch: int
    dtypes: tuple[np.dtype, ...]  # of X, W, R and the float inputs given (B, initial_h, initial_c, P)
    lens: np.dtype | None  # of sequence_lens, None where it is not given

    @staticmethod
    def of(op: str, inputs: Sequence[Any], layout: int) -> RecurrenceCase:
        """From the node's inputs (anything with shape and dtype; None where omitted) and its layout."""
        x = inputs[0]
        batch = x.shape[1] if layout == 0 else x.shape[0]
        floats = [inputs[i] for i in (0, 1, 2, 3, 5, 6, 7) if i < len(inputs)]
        lens = inputs[4] if len(inputs) > 4 and inputs[4] is not None else None
        dtypes = tuple(np.dtype(a.dtype) for a in floats if a is not None)
        return RecurrenceCase(op, batch, dtypes, None if lens is None else np.dtype(lens.dtype))

    @property
    def chosen(self) -> RecurrenceRoute:
        """The `RecurrenceRoute` of `ROUTES` this node takes, worked out once per value."""
        return _pick(self)


@functools.lru_cache(maxsize=256)
def _pick(c: RecurrenceCase) -> RecurrenceRoute:
    return next(r for r in ROUTES if r.applies(c))


def forget() -> None:
    """Drop the routes chosen so far (a test that changes what applies chooses again)."""
    _pick.cache_clear()


@dataclass(frozen=True)
class RecurrenceRoute:
    """One way to run a recurrence, as one value: its name (one meaning each), when it applies (a
    predicate of the `RecurrenceCase`; `ROUTES` is tried in order), the bytes of workspace it takes
    (`workspace(inputs, outputs, layout)`), its run (`run(op, x, w, r, b, lens, initial_h,
    initial_c, p, out, ws, attrs, specs, w_t, r_panels)`), its bound call (`bind(op, general,
    attrs, specs, outputs)`, a `Bound`), what it makes when a session prepares (`prepare(case)`),
    the loops it runs (for docs/KERNELS.md), and whether its loop is compiled."""

    name: str
    applies: Callable[[RecurrenceCase], bool]
    workspace: Callable[..., int]
    run: Callable[..., None]
    loops: tuple[str, ...]
    bind: Callable[..., Bound] | None = None
    prepare: Callable[[RecurrenceCase], None] | None = None
    compiled: bool = False


def _compiled_applies(c: RecurrenceCase) -> bool:
    return (
        getattr(jit_rnn, _LOOPS[c.op]) is not None
        and all(d == np.float32 for d in c.dtypes)
        and (c.lens is None or c.lens in (np.int32, np.int64))
        and c.batch <= jit_rnn.MAX_BATCH
    )


def _compiled_prepare(c: RecurrenceCase) -> None:
    """The node's loop compiled (and warmed) for its one signature when a session prepares."""
    jit_rnn.prepared(c.op)  # also taken when every sequence runs all steps
    if c.lens is not None:
        jit_rnn.prepared(c.op, c.lens)


def _run_compiled(op: str, x, w, r, b, lens, initial_h, initial_c, p, out, ws, attrs: dict, specs, w_t=None,
                  r_panels=None) -> None:  # fmt: skip
    made = rnn_plan.plan(op, x, w, r, b, lens, initial_h, initial_c, p, out, ws, attrs, specs, w_t, r_panels)
    if made is None:  # arrays the loop does not take
        rnn_numpy.run_numpy(op, x, w, r, b, lens, initial_h, initial_c, p, out, ws, attrs, specs, w_t)
        return
    rnn_plan.execute(made, x, initial_h, initial_c)


def _run_numpy(op: str, x, w, r, b, lens, initial_h, initial_c, p, out, ws, attrs: dict, specs, w_t=None,
               r_panels=None) -> None:  # fmt: skip
    rnn_numpy.run_numpy(op, x, w, r, b, lens, initial_h, initial_c, p, out, ws, attrs, specs, w_t)


# The recurrences' routes, tried in this order (`RecurrenceCase.chosen` takes the first that applies).
ROUTES: tuple[RecurrenceRoute, ...] = (
    RecurrenceRoute(
        "recurrence_compiled", _compiled_applies, rnn_plan.workspace, _run_compiled,
        ("jit_rnn.gru_loop, lstm_loop, rnn_loop: every step of a direction in one call (R's panels where the "
         "constants hook made them)", "the numpy route for arrays the loop does not take (a strided R)"),
        bind=rnn_plan.bound_recurrence, prepare=_compiled_prepare, compiled=True,
    ),
    RecurrenceRoute(
        "recurrence_numpy", lambda c: True, rnn_plan.workspace, _run_numpy,
        ("rnn_numpy.run_numpy: a loop with its views made once (GRU, LSTM without peepholes or coupled gates, "
         "where no sequence ends early and no clip applies)", "rnn_numpy.run_numpy: a step function per time step"),
    ),
)  # fmt: skip
ROUTE_NAMES = tuple(r.name for r in ROUTES)


@dataclass(frozen=True)
class Example:
    """A recurrence that takes `route` (a name of `ROUTES`) where compiled loops are on: op, sequence
    length, batch, input size, hidden size, dtype, attributes and whether sequence lengths are given."""

    route: str
    op: str
    seq: int
    batch: int
    size: int
    hidden: int
    dtype: type = np.float32
    attrs: dict[str, Any] = field(default_factory=dict)
    lens: bool = False


EXAMPLES = {
    "gru_compiled": Example("recurrence_compiled", "GRU", 5, 1, 4, 8, attrs={"linear_before_reset": 1}),
    "lstm_compiled": Example("recurrence_compiled", "LSTM", 4, 2, 3, 6, attrs={"direction": "bidirectional"}),
    "rnn_compiled_lens": Example("recurrence_compiled", "RNN", 6, 2, 3, 5, lens=True),
    "gru_numpy_float64": Example("recurrence_numpy", "GRU", 5, 1, 4, 8, np.float64),
    "lstm_numpy_batch": Example("recurrence_numpy", "LSTM", 3, jit_rnn.MAX_BATCH + 1, 3, 4, attrs={"clip": 2.0}),
    "rnn_numpy_float64_lens": Example("recurrence_numpy", "RNN", 4, 2, 3, 5, np.float64, lens=True),
}
