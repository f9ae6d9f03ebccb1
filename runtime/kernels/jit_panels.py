"""A recurrence's state times its weights, R h, over R laid out in panels (compiled, float32).

At batch 1 a recurrent step is a matrix-vector product over all of R (768 x 256 for a GRU of
256: 768 KB, read from L2 every step), so its speed is the speed R streams at. Dot products of
R's rows (eight rows a pass, each vectorised along the state) ran about 9.5 us a step on that
shape; here R is kept as panels of `PANEL` rows, each stored state-element-major (for each k,
the panel's `PANEL` weights of column k side by side), and a panel's sums are `PANEL / LANES`
vectors held in registers while the panel streams past once, contiguously: for each k, the
state's h[k] broadcast times one row of the panel (about 7.5 us a step on that shape).
numba does not vectorise such sums across outputs (a 16-wide block of named accumulators or
of a scratch slice ran three to seven times slower), so the panel's loop is written in LLVM's
own vector types (an intrinsic).

Rows are grouped in gate blocks of `hidden` rows (R's gate blocks, in the spec's order); each
block is cut into ceil(hidden / PANEL) panels, the last one padded with zero rows, so that a
gate's sums never share a panel with another gate's (a GRU's candidate is summed over another
vector than its two gates).
"""

from __future__ import annotations

import numpy as np

from runtime.kernels._jit import ENABLED, compiled

PANEL = 64  # rows summed per pass: eight vectors of eight floats (32 or 128 rows ran slower)
LANES = 8


def panels_per_block(hidden: int) -> int:
    return -(-hidden // PANEL)


def pack(r: np.ndarray) -> np.ndarray:
    """R (directions, gates * hidden, hidden) as panels: (directions, gates * panels_per_block *
    hidden * PANEL) float32, panel q of gate g at offset (g * panels_per_block + q) * hidden *
    PANEL, its element (k, j) the weight of row g * hidden + q * PANEL + j and column k."""
    directions, rows, hidden = r.shape
    gates, per = rows // hidden, panels_per_block(hidden)
    padded = np.zeros((directions, gates, per * PANEL, hidden), np.float32)
    padded[:, :, :hidden] = r.reshape(directions, gates, hidden, hidden)
    panels = padded.reshape(directions, gates * per, PANEL, hidden).transpose(0, 1, 3, 2)
    # On a 64-byte boundary: panels that start 16 bytes past one ran 8.35 us a product against 7.55.
    size = panels.size // directions
    block = np.empty(panels.size + 16, np.float32)
    start = (-block.ctypes.data // 4) % 16
    made = block[start : start + panels.size].reshape(directions, size)
    made[...] = panels.reshape(directions, size)
    return made


panel_dot = None  # compiled code only
if ENABLED:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def panel_dot(typingctx, rp, at, v, n, out, out_at):  # type: ignore[no-untyped-def]
        """out[out_at + j] = sum over k < n of v[k] * rp[at + k * PANEL + j] for j < PANEL, in
        float32 arrays addressed from their first elements (contiguous): the sums in
        `PANEL / LANES` vector registers, each k's row of the panel one fused multiply-add each."""
        signature = types.void(rp, types.intp, v, types.intp, out, types.intp)

        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            vector = ir.VectorType(ir.FloatType(), LANES)
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{LANES}f32"
            )
            weights, state, target = (
                context.make_array(sig.args[i])(context, builder, args[i]).data for i in (0, 2, 4)
            )
            zero = ir.Constant(vector, [0.0] * LANES)
            sums = [cgutils.alloca_once_value(builder, zero) for _ in range(PANEL // LANES)]
            start = builder.gep(weights, [args[1]])
            spread = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
            with cgutils.for_range(builder, args[3]) as loop:
                k = loop.index
                one = builder.insert_element(
                    ir.Constant(vector, ir.Undefined), builder.load(builder.gep(state, [k])), ir.IntType(32)(0)
                )
                hk = builder.shuffle_vector(one, one, spread)
                row = builder.gep(start, [builder.mul(k, k.type(PANEL))])
                for i, total in enumerate(sums):
                    w = builder.load(
                        builder.bitcast(builder.gep(row, [k.type(i * LANES)]), vector.as_pointer()), align=4
                    )
                    builder.store(builder.call(fma, [w, hk, builder.load(total)]), total)
            first = builder.gep(target, [args[5]])
            for i, total in enumerate(sums):
                place = builder.bitcast(builder.gep(first, [args[5].type(i * LANES)]), vector.as_pointer())
                builder.store(builder.load(total), place, align=4)
            return context.get_dummy_value()

        return signature, codegen


def _blocks_dot_py(rp, hidden, first, blocks, v, out, acc):
    """out[j] = R[first * hidden + j] . v for j < blocks * hidden: gate blocks `first` to
    `first + blocks` of R's panels `rp` (`pack`) times `v` (hidden,); `acc` (PANEL,) scratch for
    a last panel that is not full (its padded sums are never stored)."""
    per = (hidden + PANEL - 1) // PANEL
    size = hidden * PANEL
    for g in range(blocks):
        for q in range(per):
            at = ((first + g) * per + q) * size
            done = q * PANEL
            if done + PANEL <= hidden:
                panel_dot(rp, at, v, hidden, out, g * hidden + done)
            else:
                panel_dot(rp, at, v, hidden, acc, 0)
                for j in range(hidden - done):
                    out[g * hidden + done + j] = acc[j]


blocks_dot = compiled(_blocks_dot_py, inline=True)
