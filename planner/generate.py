"""Synthetic problems shaped like real networks, for benchmarks and property tests.

`network_like(n)` walks a chain of layers: each layer writes one activation that the next
one or two layers read; some activations feed a skip connection a few to a few dozen layers
later (residual blocks, U-Net); about a third of the layers use scratch for one step; a
graph input and output live throughout. Sizes are log-uniform between 1 KiB and 4 MiB,
in multiples of 64 bytes, as tensor sizes are.

`training_like(n)` is one training step of a deep stack of repeated layers, the shape of an
allocator trace of a training graph:

1. The stack has a few stages (as a CNN's resolutions or a transformer's blocks); every
   layer of a stage repeats the stage's template, so sizes repeat thousands of times.
2. Forward, one op a step: each op writes an activation. Most are kept until the op's
   backward step (saved for the gradient), the rest die when the next op has read them;
   some ops use scratch for their step.
3. Backward, the forward ops in reverse, one a step: each writes the gradient of its input
   (read by the next backward step), scratch, and the gradients of its weights, which wait
   for the optimizer.
4. Optimizer: one step a layer in forward order, so weight gradients are freed in the
   reverse order of their creation.
5. Weights and their two optimizer states (Adam's moments) live throughout.

Sizes are heavy-tailed: activations log-normal, weights Pareto, in multiples of 64 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class _Op:
    """One forward op of a layer template: what it writes, keeps and holds."""

    out: int  # activation bytes (its input gradient has the same size)
    saved: bool  # kept until its backward step
    scratch: int  # bytes of scratch in forward and backward (0: none)
    weights: tuple[int, ...]  # bytes of each weight


STAGES = 4
OPS_PER_LAYER = (6, 10)  # a stage's template has this many ops (inclusive range)


def training_like(n_buffers: int, seed: int = 0) -> Problem:
    rng = np.random.default_rng(seed)
    templates = [_template(rng, stage) for stage in range(STAGES)]
    per_layer = [sum(2 + 4 * len(op.weights) + 2 * (op.scratch > 0) for op in t) for t in templates]
    # Layers spread evenly over the stages, enough of them for n_buffers (then cut to size).
    layers_per_stage = max(1, -(-n_buffers // sum(per_layer)))
    layers = [t for t in templates for _ in range(layers_per_stage)]
    forward = sum(len(t) for t in layers)
    steps = 2 * forward + len(layers)
    buffers: list[Buffer] = []
    step = 0
    for i, template in enumerate(layers):
        for j, op in enumerate(template):
            back = 2 * forward - 1 - step  # this op's backward step
            name = f"{i}.{j}"
            buffers.append(Buffer(f"{name}.y", op.out, step, back if op.saved else step + 1, "activation"))
            if op.scratch:
                buffers.append(Buffer(f"{name}.s", op.scratch, step, step, "workspace"))
                buffers.append(Buffer(f"{name}.bs", op.scratch, back, back, "workspace"))
            buffers.append(Buffer(f"{name}.dx", op.out, back, min(back + 1, 2 * forward - 1), "backprop"))
            for k, size in enumerate(op.weights):
                buffers.append(Buffer(f"{name}.w{k}", size, 0, steps - 1, "trainable"))
                buffers.append(Buffer(f"{name}.m{k}", size, 0, steps - 1, "optimizer"))
                buffers.append(Buffer(f"{name}.v{k}", size, 0, steps - 1, "optimizer"))
                buffers.append(Buffer(f"{name}.dw{k}", size, back, 2 * forward + i, "gradient"))
            step += 1
    return Problem(buffers=tuple(buffers[:n_buffers]), steps=steps, name=f"training_like_{n_buffers}")


def _template(rng: np.random.Generator, stage: int) -> list[_Op]:
    """A stage's layer: activations shrink and weights grow from stage to stage, as in a CNN."""
    ops = []
    for _ in range(int(rng.integers(OPS_PER_LAYER[0], OPS_PER_LAYER[1] + 1))):
        out = _bytes(rng.lognormal(np.log(512 << 10), 1.2) / 2**stage)
        scratch = _bytes(rng.lognormal(np.log(64 << 10), 1.5)) if rng.random() < 0.3 else 0
        count = int(rng.choice([0, 0, 1, 2]))
        weights = tuple(_bytes((rng.pareto(1.2) + 1) * (4 << 10) * 2**stage) for _ in range(count))
        ops.append(_Op(out, bool(rng.random() < 0.6), scratch, weights))
    return ops


def _bytes(value: float) -> int:
    """A tensor size: a multiple of 64 bytes, between 64 bytes and 256 MiB."""
    return int(min(max(value, 64), 256 << 20)) // 64 * 64
