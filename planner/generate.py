"""Synthetic problems shaped like real networks, for benchmarks and property tests.

`network_like(n)` walks a chain of layers: each layer writes one activation that the next
one or two layers read; some activations feed a skip connection a few to a few dozen layers
later (residual blocks, U-Net); about a third of the layers use scratch for one step; a
graph input and output live throughout. Sizes are log-uniform between 1 KiB and 4 MiB,
in multiples of 64 bytes, as tensor sizes are.
"""

from __future__ import annotations

import numpy as np

from planner.problem import Buffer, Problem


def network_like(n_buffers: int, seed: int = 0) -> Problem:
    rng = np.random.default_rng(seed)
    buffers: list[Buffer] = []

    def size() -> int:
        return int(np.exp(rng.uniform(np.log(1024), np.log(4 << 20)))) // 64 * 64 + 64

    step = 0
    while len(buffers) < n_buffers - 2:
        lifetime = int(rng.integers(1, 3))
        if rng.random() < 0.15:
            lifetime = int(rng.integers(4, 40))
        buffers.append(Buffer(f"t{len(buffers)}", size(), step, step + lifetime, "activation"))
        if rng.random() < 0.3 and len(buffers) < n_buffers - 2:
            buffers.append(Buffer(f"t{len(buffers)}", size(), step, step, "workspace"))
        step += 1
    steps = max(b.last for b in buffers) + 1 if buffers else 1
    buffers.append(Buffer("input", size(), 0, steps - 1, "input"))
    buffers.append(Buffer("output", size(), 0, steps - 1, "output"))
    return Problem(buffers=tuple(buffers[:n_buffers]), steps=steps, name=f"network_like_{n_buffers}")
