"""Compiled transforms of Winograd's F(2x2, 3x3) convolution (`runtime.kernels._jit`).

A 3x3, stride-1 conv computes each 2x2 block of output pixels of filter k from the 4x4
input tile d under it as ``A^T [sum_c (G g_kc G^T) * (B^T d_c B)] A`` (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks", 2016): 16 products per channel pair instead
of 36. The elementwise products summed over channels are 16 matmuls, (K, C) @ (C, tiles),
one per tile position, which BLAS runs; the three transforms, which numpy would run as
several passes over memory, are the loops here:

* `weights` writes U[i * 4 + j, k, c] = (G g_kc G^T)[i, j];
* `inputs` writes V[i * 4 + j, c, t] = (B^T d B)[i, j] for tiles [t0, t0 + nt) of the image
  straight from the unpadded image (pads read as zeros in the loop, no padded copy);
* `outputs` writes A^T M A, the 2x2 output block of every filter and tile of the band,
  into the output image (the blocks that fall past an odd edge dropped).

V and M are flat, each of their 16 planes `ps` floats apart, and both transforms go through
a small scratch (`scratch_elements`: a row of tiles of an input channel, a band's tiles of a
filter) in loops over contiguous runs the compiler vectorises across tiles: a tile at a
time, with 16 stores (or loads) scattered over strided planes, ran scalar (ResNet-50's 64
channels of 56 x 56: input transform 0.78 -> 0.39 ms, output 0.20 -> 0.14 ms).

Bias and activation then go over the band's output rows by `jit_conv.epilogue`, in cache.
Loops allocate nothing and keep NaN and infinities (`_jit`'s rules); with compiled loops off
they are None and Conv keeps its im2col route.
"""

from __future__ import annotations

import functools

import numpy as np

from runtime.kernels._jit import ENABLED, compiled
from runtime.kernels.conv.jit_winograd_shared import DTYPE as DTYPE
from runtime.kernels.conv.jit_winograd_shared import plane as _plane
from runtime.kernels.conv.jit_winograd_shared import row as _row
from runtime.kernels.conv.jit_winograd_shared import unsigned as _u
from runtime.kernels.conv.jit_winograd_shared import variant_loops, warm_variant

TILE = 2  # output pixels per tile side
ALPHA = 4  # input tile side: TILE + 3 - 1


def _weights(w, u):  # type: ignore[no-untyped-def]
    """u (16, K, C) = G g G^T of every 3x3 filter g = w[k, c] (w (K, C, 3, 3))."""
    filters, channels = w.shape[0], w.shape[1]
    half = np.float32(0.5)
    for k in range(filters):
        for c in range(channels):
            g = w[k, c]
            # t = G g: 4x3
            t00, t01, t02 = g[0, 0], g[0, 1], g[0, 2]
            t10 = (g[0, 0] + g[1, 0] + g[2, 0]) * half
            t11 = (g[0, 1] + g[1, 1] + g[2, 1]) * half
            t12 = (g[0, 2] + g[1, 2] + g[2, 2]) * half
            t20 = (g[0, 0] - g[1, 0] + g[2, 0]) * half
            t21 = (g[0, 1] - g[1, 1] + g[2, 1]) * half
            t22 = (g[0, 2] - g[1, 2] + g[2, 2]) * half
            t30, t31, t32 = g[2, 0], g[2, 1], g[2, 2]
            _store_gt(u, 0, k, c, t00, t01, t02, half)
            _store_gt(u, 1, k, c, t10, t11, t12, half)
            _store_gt(u, 2, k, c, t20, t21, t22, half)
            _store_gt(u, 3, k, c, t30, t31, t32, half)


def _store_gt(u, i, k, c, a, b, d, half):  # type: ignore[no-untyped-def]
    """Row i of (G g) G^T from row i of G g: (a, b, d) -> (a, (a+b+d)/2, (a-b+d)/2, d)."""
    u[i * 4 + 0, k, c] = a
    u[i * 4 + 1, k, c] = (a + b + d) * half
    u[i * 4 + 2, k, c] = (a - b + d) * half
    u[i * 4 + 3, k, c] = d


def _inputs(x, v, ps, zeros, saved, first_saved, t0, nt, tiles_w, ph, pw, z):  # type: ignore[no-untyped-def]
    """V = B^T d B for tiles [t0, t0 + nt), whole rows of `tiles_w` tiles, of image x (C, H, W),
    into the flat `v`: V[i * 4 + j, c, t] at v[(i * 4 + j) * ps + c * nt + t]. Tile (ty, tx)
    reads rows 2ty - ph.. and columns 2tx - pw.., zeros outside the image (rows outside read
    `zeros`, a zero row at least W long). Rows [first_saved, first_saved + len(saved)) are
    read from `saved` (S, C, W) instead: the rows an output written over the image has
    already overwritten. `z` is scratch of `scratch_elements` floats.

    Separably, in passes the compiler vectorises (a tile at a time, 16 scattered stores, ran
    scalar): the rows of B^T d over a whole row of tiles (4 combinations of the 4 input
    rows, pads as zeros), each split into its even and odd columns, then B on the right of
    every tile as differences of neighbouring even and odd columns."""
    channels, height, width = x.shape
    first = t0 // tiles_w
    wp, half = 2 * tiles_w + 2, tiles_w + 1  # padded columns a row of tiles reads; their halves
    lo = min(wp, pw)  # padded columns [lo, hi) are the image's
    hi = max(lo, min(wp, pw + width))
    stride = _u(ps)
    zero = np.float32(0.0)
    ev, od = z[4 * wp : 4 * wp + half], z[4 * wp + half : 4 * wp + 2 * half]
    for c in range(channels):
        for r in range(nt // tiles_w):
            y0 = (first + r) * 2 - ph
            r0 = _row(x, c, y0, height, zeros, saved, first_saved)
            r1 = _row(x, c, y0 + 1, height, zeros, saved, first_saved)
            r2 = _row(x, c, y0 + 2, height, zeros, saved, first_saved)
            r3 = _row(x, c, y0 + 3, height, zeros, saved, first_saved)
            za, zb, zc, zd = z[:wp], z[wp : 2 * wp], z[2 * wp : 3 * wp], z[3 * wp : 4 * wp]
            for i in range(lo):
                za[i], zb[i], zc[i], zd[i] = zero, zero, zero, zero
            for i in range(hi, wp):
                za[i], zb[i], zc[i], zd[i] = zero, zero, zero, zero
            at, start = _u(lo), _u(lo - pw)
            for i in range(_u(hi - lo)):
                d0, d1, d2, d3 = r0[start + i], r1[start + i], r2[start + i], r3[start + i]
                za[at + i], zb[at + i], zc[at + i], zd[at + i] = d0 - d2, d1 + d2, d2 - d1, d1 - d3
            base = _u(c * nt + r * tiles_w)
            for g in range(4):
                row = z[g * wp : (g + 1) * wp]
                for j in range(_u(half)):
                    ev[j], od[j] = row[_u(2) * j], row[_u(2) * j + _u(1)]
                o0 = _u(4 * g) * stride + base
                o1, o2, o3 = o0 + stride, o0 + _u(2) * stride, o0 + _u(3) * stride
                # B on the right of columns (x0, x1, x2, x3) = (ev[t], od[t], ev[t + 1], od[t + 1])
                for t in range(_u(tiles_w)):
                    e0, e1, o_0, o_1 = ev[t], ev[t + _u(1)], od[t], od[t + _u(1)]
                    v[o0 + t], v[o1 + t], v[o2 + t], v[o3 + t] = e0 - e1, o_0 + e1, e1 - o_0, o_0 - o_1


def scratch_elements(tiles_w: int, band: int) -> int:
    """Floats of the scratch `z` of `inputs` and `outputs` for bands of `band` tiles in rows of `tiles_w`."""
    return max(4 * (2 * tiles_w + 2) + 2 * (tiles_w + 1), 4 * band)


def _outputs(m, ps, y, t0, nt, tiles_w, z):  # type: ignore[no-untyped-def]
    """y (K, OH, OW) tile blocks = A^T M A for tiles [t0, t0 + nt), whole rows of `tiles_w`
    tiles, M[i, k, t] at m[i * ps + k * nt + t] (flat); the row and column past an odd edge
    are dropped. `z` is scratch of at least 4 * nt floats: each tile's four outputs go there
    first, the band's tiles of a filter at a time (vectorised across tiles), then into the
    output rows as pairs of columns."""
    filters, out_h, out_w = y.shape
    first = t0 // tiles_w
    full = out_w // 2  # tiles whose two columns are both inside
    te, to, be, bo = z[:nt], z[nt : 2 * nt], z[2 * nt : 3 * nt], z[3 * nt : 4 * nt]
    for k in range(filters):
        # the band's tiles of filter k in one run per plane (longer vectorised loops than a row's)
        base = k * nt
        m0, m1, m2, m3 = (
            _plane(m, 0, ps, base, nt),
            _plane(m, 1, ps, base, nt),
            _plane(m, 2, ps, base, nt),
            _plane(m, 3, ps, base, nt),
        )
        m4, m5, m6, m7 = (
            _plane(m, 4, ps, base, nt),
            _plane(m, 5, ps, base, nt),
            _plane(m, 6, ps, base, nt),
            _plane(m, 7, ps, base, nt),
        )
        m8, m9, m10, m11 = (
            _plane(m, 8, ps, base, nt),
            _plane(m, 9, ps, base, nt),
            _plane(m, 10, ps, base, nt),
            _plane(m, 11, ps, base, nt),
        )
        m12, m13, m14, m15 = (
            _plane(m, 12, ps, base, nt),
            _plane(m, 13, ps, base, nt),
            _plane(m, 14, ps, base, nt),
            _plane(m, 15, ps, base, nt),
        )
        for t in range(_u(nt)):
            # s = A^T m: rows (m0 + m1 + m2, m1 - m2 - m3) of each column j; then A on the right
            s00 = m0[t] + m4[t] + m8[t]
            s01 = m1[t] + m5[t] + m9[t]
            s02 = m2[t] + m6[t] + m10[t]
            s03 = m3[t] + m7[t] + m11[t]
            s10 = m4[t] - m8[t] - m12[t]
            s11 = m5[t] - m9[t] - m13[t]
            s12 = m6[t] - m10[t] - m14[t]
            s13 = m7[t] - m11[t] - m15[t]
            te[t], to[t] = s00 + s01 + s02, s01 - s02 - s03
            be[t], bo[t] = s10 + s11 + s12, s11 - s12 - s13
        for r in range(nt // tiles_w):
            oy, at = (first + r) * 2, r * tiles_w
            _interleave(y[k, oy], te[at:], to[at:], full, tiles_w)
            if oy + 1 < out_h:
                _interleave(y[k, oy + 1], be[at:], bo[at:], full, tiles_w)


def _interleave(row, even, odd, full, tiles_w):  # type: ignore[no-untyped-def]
    """row[2 t], row[2 t + 1] = even[t], odd[t] for the `full` tiles inside; past an odd right
    edge, the last tile's first column only."""
    for t in range(_u(full)):
        row[_u(2) * t], row[_u(2) * t + _u(1)] = even[t], odd[t]
    for t in range(full, tiles_w):
        row[2 * t] = even[t]


if ENABLED:
    _store_gt = compiled(_store_gt, inline=True)  # type: ignore[assignment]
    _interleave = compiled(_interleave, inline=True)  # type: ignore[assignment]
weights, inputs, outputs = variant_loops(_weights, _inputs, _outputs)


@functools.cache
def warm() -> None:
    """Compile the loops (or load them from numba's cache) on tiny calls, at prepare."""
    warm_variant((weights, inputs, outputs), 16, 2, scratch_elements)
