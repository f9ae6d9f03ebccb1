"""How a model's memory is laid out: one frozen value that every entry point builds the same way.

The CLI, REST bodies, the model page's form, pipelines, batch sessions and training all pass
a `MemoryOptions` to `memory_problem`, `Session` and friends; its defaults are defined here once.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from runtime.errors import ModelError

DEFAULT_ALIGNMENT = 64  # bytes: a cache line, and what numpy's SIMD loops like
IoMode = Literal["arena", "external"]
IO_MODES: tuple[str, ...] = get_args(IoMode)
# The on/off fields of MemoryOptions.
SWITCHES = ("workspace", "inplace", "concat_inplace", "fuse", "prepared_weights")


@dataclass(frozen=True)
class MemoryOptions:
    """What the planner may put in the arena and which aliases it may take."""

    io: IoMode = "arena"  # model inputs/outputs planned in the arena or held by the caller
    workspace: bool = True  # kernel scratch planned in the arena
    alignment: int = DEFAULT_ALIGNMENT  # bytes
    inplace: bool = True  # ops write over an input that dies there
    concat_inplace: bool = True  # Concat's producers write straight into their slices
    fuse: bool = True  # load-time fusions (BatchNorm into Conv, Conv+Add, GELU)
    # Kernels may transform constant weights once, at a session's prepare, and keep the copies
    # beside the arena (Winograd's U, RNNs' R panels and W^T), or per call in their workspace
    # (Winograd's U of a shared weight). Off: no transformed copy anywhere, every kernel reads
    # its weights as stored (im2col instead of Winograd), for fewer parameter bytes and less time.
    prepared_weights: bool = True

    def __post_init__(self) -> None:
        if self.io not in IO_MODES:
            raise ModelError(f"io={self.io!r}: accepted values are {IO_MODES}")
        if not isinstance(self.alignment, numbers.Integral) or self.alignment < 1:
            raise ModelError(f"alignment={self.alignment!r}: must be a positive number of bytes")
        for name in SWITCHES:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ModelError(f"{name}={value!r}: a switch, accepted values are True and False")

    def replace(self, **changes: Any) -> MemoryOptions:
        """A copy with `changes` applied (validated like a new value)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoryOptions:
        """The options `to_json` wrote; missing keys take their defaults, unknown keys are refused."""
        accepted = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(k for k in data if k not in accepted)
        if unknown:
            raise ModelError(f"memory options: unknown key(s) {unknown}; accepted keys are {accepted}")
        return cls(**data)
