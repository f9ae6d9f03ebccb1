"""A session's unbound initializers: declared with ``Session(unbound=...)``, committed to no
memory at prepare, and bound later by `Session.set_shared_input` to an array the caller holds
(read, never copied when it is C-contiguous and aligned), so that several sessions read one
copy of the same weights (`runtime.batches`, `runtime.pipeline`)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from runtime.arena import read_only
from runtime.errors import FeedError, ModelError
from runtime.graph import Graph
from runtime.params import ParameterStore


class SharedInputs:
    """The initializers declared unbound (`names`, in the order given, once each) and the arrays
    bound to them so far (`bound`, read-only)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(dict.fromkeys(names))
        self.bound: dict[str, np.ndarray] = {}

    def check(self, graph: Graph) -> None:
        """Every declared name is an initializer `graph` still reads."""
        accepted = [n for n, c in graph.constants.items() if c.source in ("initializer", "external")]
        wrong = [n for n in self.names if n not in accepted]
        if wrong:
            raise ModelError(
                f"unbound={wrong}: only initializers the graph still reads can be left unbound; accepted: {accepted}"
            )

    @property
    def missing(self) -> list[str]:
        """Declared names not bound yet."""
        return [n for n in self.names if n not in self.bound]

    def bind(self, name: str, array: np.ndarray, graph: Graph, params: ParameterStore | None) -> np.ndarray:
        """Bind declared initializer `name` of `graph` to `array` and return what steps read
        (interned by `params` when given). Binding it again is accepted only with equal data."""
        if name not in self.names:
            raise FeedError(
                f"{name!r} was not declared unbound; the session's unbound initializers are {list(self.names)}"
            )
        c = graph.constants[name]
        want = f"{c.dtype}{list(c.shape)}"
        if not isinstance(array, np.ndarray) or array.shape != c.shape or array.dtype != c.dtype:
            got = f"{array.dtype}{list(array.shape)}" if isinstance(array, np.ndarray) else type(array).__name__
            raise FeedError(f"shared input {name!r}: got {got}; it is declared {want}")
        held = self.bound.get(name)
        if held is not None:
            if held.base is array or held is array or np.array_equal(held, array):
                return held
            raise FeedError(
                f"shared input {name!r} is already bound to different data; a shared input is bound once per session"
            )
        value = array if array.flags.c_contiguous and array.flags.aligned else np.ascontiguousarray(array)
        if params is not None:
            value = params.intern(value)
        self.bound[name] = read_only(value)
        return self.bound[name]
