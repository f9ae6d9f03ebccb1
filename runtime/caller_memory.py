"""A session's graph inputs and outputs: arrays fed to `run`, caller arrays bound to them
(`runtime.binding`), and the session's own buffers handed out to be written or read in place.

Inputs given to `run` are copied into the arena (or read where they are when planned outside
it); bound inputs are read in place or copied as their binding says; inputs written through
`input_buffer` are already there. Outputs come back as fresh copies, as the caller's bound
array, or (without a copy) as the session's `output_buffer`. `RunStats` counts every copy.

`CallerMemoryMethods` gives `runtime.Session` its public face of this: `input_buffer`,
`output_buffer`, `bind_input`, `bind_output` and `bindings`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from runtime.arena import aligned_arena, read_only
from runtime.binding import Binding, make_binding
from runtime.canary import Canary
from runtime.errors import FeedError
from runtime.graph import Graph, TensorInfo
from runtime.options import DEFAULT_ALIGNMENT
from runtime.stats import RunStats


class CallerMemory:
    """The I/O side of one prepared session: `views` are its arena views, `values`/`slot` what
    each step reads, by tensor; `alignment` (0: the element's own) is what zero-copy needs."""

    def __init__(
        self,
        graph: Graph,
        views: Mapping[str, np.ndarray],
        values: list[np.ndarray | None],
        slot: Mapping[str, int],
        alignment: int,
    ) -> None:
        self.graph = graph
        self.views = views
        self.values = values
        self.slot = slot
        self.alignment = alignment
        self.bindings: dict[str, Binding] = {}
        self.own: set[str] = set()  # inputs/outputs whose session buffer the caller holds

    # ---- handing out buffers, binding caller arrays ---------------------------------------------------

    def input_buffer(self, name: str) -> np.ndarray:
        self.info(name, "input")
        if name in self.views:
            self.own.add(name)
            return self.views[name]
        if name not in self.own:
            t = self.graph.tensors[name]
            self.bind(name, "input", aligned_arena(t.nbytes, DEFAULT_ALIGNMENT).view(t.dtype).reshape(t.shape))
            self.own.add(name)
        return self.bindings[name].array

    def output_buffer(self, name: str) -> np.ndarray:
        self.info(name, "output")
        if name in self.views:
            self.own.add(name)
            return read_only(self.views[name])
        if name not in self.own:
            t = self.graph.tensors[name]
            self.bind(name, "output", aligned_arena(t.nbytes, DEFAULT_ALIGNMENT).view(t.dtype).reshape(t.shape))
            self.own.add(name)
        return read_only(self.bindings[name].array)

    def bind(self, name: str, role: str, array: np.ndarray) -> Binding:
        info = self.info(name, role)
        others = [b for n, b in self.bindings.items() if n != name]
        binding = make_binding(
            name, role, array, info, in_arena=name in self.views, alignment=self.alignment, others=others
        )
        self.bindings[name] = binding
        self.own.discard(name)
        return binding

    def info(self, name: str, role: str) -> TensorInfo:
        names = self.graph.inputs if role == "input" else self.graph.outputs
        if name not in names:
            hint = "; it is an initializer: see set_shared_input" if name in self.graph.constants else ""
            raise FeedError(
                f"{name!r} is not a graph {role} of {self.graph.name!r}{hint}; its {role}s are {list(names)}"
            )
        return self.graph.tensors[name]

    # ---- one run: inputs in, outputs out -------------------------------------------------------------

    def check_feeds(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The arrays given to `run`, checked against the graph's inputs (cast within a dtype kind)."""
        expected = {n: self.graph.tensors[n] for n in self.graph.inputs}
        supplied = set(self.bindings) | self.own
        missing = [n for n in expected if n not in inputs and n not in supplied]
        unknown = [n for n in inputs if n not in expected]
        if missing or unknown:
            want = ", ".join(f"{n!r}: {t.dtype}{list(t.shape)}" for n, t in expected.items())
            raise FeedError(f"inputs missing {missing} / unknown {unknown}; the model takes {{{want}}}")
        feeds = {}
        for name, t in expected.items():
            if name not in inputs:
                continue
            array = np.asarray(inputs[name])
            if array.shape != t.shape:
                raise FeedError(f"input {name!r} has shape {list(array.shape)}; the model is bound to {list(t.shape)}")
            if array.dtype != t.dtype:
                if array.dtype.kind != t.dtype.kind:
                    raise FeedError(f"input {name!r} has dtype {array.dtype}; the model takes {t.dtype}")
                array = array.astype(t.dtype)
            feeds[name] = array
        return feeds

    def fill_inputs(self, feeds: dict[str, np.ndarray], stats: RunStats, canary: Canary | None) -> None:
        """Inputs given to `run` are copied; bound ones are read in place or copied as their
        binding says; `input_buffer` ones are already there."""
        views = self.views
        in_place = [n for n in self.graph.inputs if n in views and n not in feeds and n not in self.bindings]
        if canary is not None:
            # The canary poisons the whole arena first: keep what the caller wrote in place.
            kept = {n: views[n].copy() for n in in_place}
            canary.start([n for n in self.graph.inputs if n in views])
            for n, array in kept.items():
                views[n][...] = array
        for name in self.graph.inputs:
            if name in feeds:
                self._feed(name, feeds[name], stats)
            elif name in self.bindings:
                self._feed_bound(self.bindings[name], stats)

    def _feed(self, name: str, array: np.ndarray, stats: RunStats) -> None:
        if name in self.views:
            self.views[name][...] = array
            stats.count_copy(array.nbytes)
            return
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
            stats.count_copy(array.nbytes)
        self.values[self.slot[name]] = read_only(array)

    def _feed_bound(self, binding: Binding, stats: RunStats) -> None:
        name = binding.name
        if binding.zero_copy:
            self.values[self.slot[name]] = read_only(binding.array)
            return
        if name in self.views:
            self.views[name][...] = binding.array
        else:
            t = self.graph.tensors[name]
            self.values[self.slot[name]] = read_only(np.array(binding.array, dtype=t.dtype, order="C"))
        stats.count_copy(binding.nbytes)

    def external_outputs(self) -> dict[str, np.ndarray]:
        """Where outputs planned outside the arena are computed: the caller's bound array when it
        fits, else a fresh array (copied into a bound array after the run)."""
        out = {}
        for name in self.graph.outputs:
            t = self.graph.tensors.get(name)
            if t is not None and t.producer is not None and name not in self.views:
                b = self.bindings.get(name)
                out[name] = b.array if b is not None and b.zero_copy else np.empty(t.shape, t.dtype)
                self.values[self.slot[name]] = out[name]
        return out

    def collect(self, external: dict[str, np.ndarray], stats: RunStats) -> dict[str, np.ndarray]:
        """One array per graph output, in graph output order (see the module docstring)."""
        results = {}
        for name in self.graph.outputs:
            b = self.bindings.get(name)
            if name in external:
                source = external[name]
                if b is None or b.zero_copy:
                    results[name] = source
                    continue
            else:
                value = self.views[name] if name in self.views else self.values[self.slot[name]]
                assert value is not None
                source = value
                if b is None and name in self.own:
                    results[name] = read_only(source)
                    continue
            if b is not None:
                np.copyto(b.array, source, casting="unsafe")
                results[name] = b.array
            else:
                results[name] = np.array(source, copy=True)
            stats.count_copy(source.nbytes)
        return results


class CallerMemoryMethods:
    """Zero-copy inputs and outputs, as methods of the session that mixes this in: it provides
    `_caller_memory()`, its `CallerMemory` once prepared, and holds it as `_io` (None before)."""

    _io: CallerMemory | None

    def _caller_memory(self) -> CallerMemory:
        raise NotImplementedError

    @property
    def bindings(self) -> dict[str, Binding]:
        return dict(self._io.bindings) if self._io is not None else {}

    def input_buffer(self, name: str) -> np.ndarray:
        """The session's own buffer for graph input `name`: write it before each run, then call
        `run()` without that input. Under ``io="arena"`` it is the arena view (its bytes are reused
        once the input is dead, so write it again before every run)."""
        return self._caller_memory().input_buffer(name)

    def output_buffer(self, name: str) -> np.ndarray:
        """The buffer graph output `name` is computed into, read-only: `run` returns it without a
        copy, and its contents stay valid until the next run of any session sharing the arena."""
        return self._caller_memory().output_buffer(name)

    def bind_input(self, name: str, array: np.ndarray) -> Binding:
        """Read graph input `name` from the caller's `array` on every run (which then needs no
        value for it). Zero-copy when it fits, else copied each run: see the Binding's reason."""
        return self._caller_memory().bind(name, "input", array)

    def bind_output(self, name: str, array: np.ndarray) -> Binding:
        """Compute graph output `name` into the caller's `array` (returned by `run` too)."""
        return self._caller_memory().bind(name, "output", array)
