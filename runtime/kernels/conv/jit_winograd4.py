"""Compiled transforms of Winograd's F(4x4, 3x3) convolution (`runtime.kernels._jit`).

The same scheme as `runtime.kernels.conv.jit_winograd`'s F(2x2, 3x3), with 4x4 output blocks
from 6x6 input tiles: 36 products per channel pair and block instead of 144 (F(2x2)'s four
blocks take 64), at the price of larger transforms and rounding error (Lavin and Gray,
2016: points 0, 1, -1, 2, -2 and infinity; about 1e-6 relative in float32 on ResNet's
layers, against 1e-7 for F(2x2)). The loops take the same arguments as F(2x2)'s:

* `weights` writes U[i * 6 + j, k, c] = (G g_kc G^T)[i, j], in float64 then rounded once;
* `inputs` writes V[i * 6 + j, c, t] = (B^T d B)[i, j] for tiles [t0, t0 + nt) from the
  unpadded image: the rows of B^T d over a row of tiles, then B on the right of every tile
  straight from those rows (columns 4 t to 4 t + 5; splitting the rows into the columns'
  four phases first, as F(2x2) splits its even and odd ones, took 15-25% longer);
* `outputs` writes A^T M A, a 4x4 block per filter and tile, the columns and rows past the
  output's edge dropped: A^T on each of the 6 columns, then A on each of the 4 rows, the
  band's tiles of a filter at a time, then into the output rows as quadruples of columns.

Each loop runs over contiguous runs of tiles, which the compiler vectorises.
"""

from __future__ import annotations

import functools

import numpy as np

from runtime.kernels._jit import ENABLED, compiled
from runtime.kernels.conv.jit_winograd_shared import plane as _plane
from runtime.kernels.conv.jit_winograd_shared import row as _row
from runtime.kernels.conv.jit_winograd_shared import unsigned as _u
from runtime.kernels.conv.jit_winograd_shared import variant_loops, warm_variant

TILE = 4  # output pixels per tile side
ALPHA = 6  # input tile side: TILE + 3 - 1


def _g_row(a, b, c):  # type: ignore[no-untyped-def]
    """G (a, b, c): the six rows of G applied to one column (or row) of a 3x3 filter."""
    return (
        a / 4.0,
        -(a + b + c) / 6.0,
        -(a - b + c) / 6.0,
        a / 24.0 + b / 12.0 + c / 6.0,
        a / 24.0 - b / 12.0 + c / 6.0,
        c,
    )


def _weights(w, u):  # type: ignore[no-untyped-def]
    """u (36, K, C) = G g G^T of every 3x3 filter g = w[k, c] (w (K, C, 3, 3))."""
    filters, channels = w.shape[0], w.shape[1]
    for k in range(filters):
        for c in range(channels):
            g = w[k, c]
            # the columns of G g, in float64
            c0 = _g_row(np.float64(g[0, 0]), np.float64(g[1, 0]), np.float64(g[2, 0]))
            c1 = _g_row(np.float64(g[0, 1]), np.float64(g[1, 1]), np.float64(g[2, 1]))
            c2 = _g_row(np.float64(g[0, 2]), np.float64(g[1, 2]), np.float64(g[2, 2]))
            for i in range(6):
                row = _g_row(c0[i], c1[i], c2[i])
                for j in range(6):
                    u[i * 6 + j, k, c] = row[j]


def _bt(d0, d1, d2, d3, d4, d5):  # type: ignore[no-untyped-def]
    """B^T (d0, ..., d5)."""
    return (
        4 * d0 - 5 * d2 + d4,
        d3 + d4 - 4 * (d1 + d2),
        d4 - d3 + 4 * (d1 - d2),
        d4 - d2 + 2 * (d3 - d1),
        d4 - d2 + 2 * (d1 - d3),
        4 * d1 - 5 * d3 + d5,
    )


def _at(m0, m1, m2, m3, m4, m5):  # type: ignore[no-untyped-def]
    """A^T (m0, ..., m5)."""
    a, b = m1 + m2, m1 - m2
    c, d = m3 + m4, m3 - m4
    return m0 + a + c, b + 2 * d, a + 4 * c, b + 8 * d + m5


def scratch_elements(tiles_w: int, band: int) -> int:
    """Floats of the scratch `z` of `inputs` and `outputs` for bands of `band` tiles in rows of `tiles_w`."""
    return max(6 * (4 * tiles_w + 2), 40 * band)


def _inputs(x, v, ps, zeros, saved, first_saved, t0, nt, tiles_w, ph, pw, z):  # type: ignore[no-untyped-def]
    """V = B^T d B for tiles [t0, t0 + nt), whole rows of `tiles_w` tiles, of image x (C, H, W),
    into the flat `v`: V[i * 6 + j, c, t] at v[(i * 6 + j) * ps + c * nt + t]; the arguments
    as for `jit_winograd.inputs` (tile (ty, tx) reads rows 4 ty - ph.. and columns 4 tx - pw..)."""
    channels, height, width = x.shape
    first = t0 // tiles_w
    wp = 4 * tiles_w + 2  # padded columns a row of tiles reads
    lo = min(wp, pw)
    hi = max(lo, min(wp, pw + width))
    stride = _u(ps)
    zero = np.float32(0.0)
    z0, z1, z2 = z[:wp], z[wp : 2 * wp], z[2 * wp : 3 * wp]
    z3, z4, z5 = z[3 * wp : 4 * wp], z[4 * wp : 5 * wp], z[5 * wp : 6 * wp]
    for c in range(channels):
        for r in range(nt // tiles_w):
            y0 = (first + r) * 4 - ph
            r0 = _row(x, c, y0, height, zeros, saved, first_saved)
            r1 = _row(x, c, y0 + 1, height, zeros, saved, first_saved)
            r2 = _row(x, c, y0 + 2, height, zeros, saved, first_saved)
            r3 = _row(x, c, y0 + 3, height, zeros, saved, first_saved)
            r4 = _row(x, c, y0 + 4, height, zeros, saved, first_saved)
            r5 = _row(x, c, y0 + 5, height, zeros, saved, first_saved)
            for i in range(lo):
                z0[i], z1[i], z2[i], z3[i], z4[i], z5[i] = zero, zero, zero, zero, zero, zero
            for i in range(hi, wp):
                z0[i], z1[i], z2[i], z3[i], z4[i], z5[i] = zero, zero, zero, zero, zero, zero
            at, start = _u(lo), _u(lo - pw)
            for i in range(_u(hi - lo)):
                s = start + i
                z0[at + i], z1[at + i], z2[at + i], z3[at + i], z4[at + i], z5[at + i] = _bt(
                    r0[s], r1[s], r2[s], r3[s], r4[s], r5[s]
                )
            base = _u(c * nt + r * tiles_w)
            for g in range(6):
                row = z[g * wp : (g + 1) * wp]
                o0 = _u(6 * g) * stride + base
                o1, o2, o3 = o0 + stride, o0 + _u(2) * stride, o0 + _u(3) * stride
                o4, o5 = o0 + _u(4) * stride, o0 + _u(5) * stride
                for t in range(_u(tiles_w)):
                    f = _u(4) * t
                    v[o0 + t], v[o1 + t], v[o2 + t], v[o3 + t], v[o4 + t], v[o5 + t] = _bt(
                        row[f], row[f + _u(1)], row[f + _u(2)], row[f + _u(3)], row[f + _u(4)], row[f + _u(5)]
                    )


def _outputs(m, ps, y, t0, nt, tiles_w, z):  # type: ignore[no-untyped-def]
    """y (K, OH, OW) tile blocks = A^T M A for tiles [t0, t0 + nt), whole rows of `tiles_w`
    tiles, M[i, k, t] at m[i * ps + k * nt + t] (flat); the rows and columns past the edge
    dropped. `z` is scratch of `scratch_elements` floats: A^T M (24 runs of the band's tiles
    of a filter), then the 16 outputs of each tile, then the output rows."""
    filters, out_h, out_w = y.shape
    first = t0 // tiles_w
    n = _u(nt)
    for k in range(filters):
        base = k * nt
        # z[i * 6 + j] = (A^T M)[i, j]: A^T on each column j (contiguous runs: plain indices vectorise)
        for j in range(6):
            m0, m1, m2 = _plane(m, j, ps, base, nt), _plane(m, 6 + j, ps, base, nt), _plane(m, 12 + j, ps, base, nt)
            m3, m4, m5 = (
                _plane(m, 18 + j, ps, base, nt),
                _plane(m, 24 + j, ps, base, nt),
                _plane(m, 30 + j, ps, base, nt),
            )
            s0, s1, s2, s3 = (
                _plane(z, j, nt, 0, nt),
                _plane(z, 6 + j, nt, 0, nt),
                _plane(z, 12 + j, nt, 0, nt),
                _plane(z, 18 + j, nt, 0, nt),
            )
            for t in range(n):
                s0[t], s1[t], s2[t], s3[t] = _at(m0[t], m1[t], m2[t], m3[t], m4[t], m5[t])
        # z[24 + i * 4 + j] = (A^T M A)[i, j]: A on each row i
        for i in range(4):
            a0, a1, a2 = _plane(z, 6 * i, nt, 0, nt), _plane(z, 6 * i + 1, nt, 0, nt), _plane(z, 6 * i + 2, nt, 0, nt)
            a3, a4, a5 = (
                _plane(z, 6 * i + 3, nt, 0, nt),
                _plane(z, 6 * i + 4, nt, 0, nt),
                _plane(z, 6 * i + 5, nt, 0, nt),
            )
            e = 24 + 4 * i
            e0, e1, e2, e3 = (
                _plane(z, e, nt, 0, nt),
                _plane(z, e + 1, nt, 0, nt),
                _plane(z, e + 2, nt, 0, nt),
                _plane(z, e + 3, nt, 0, nt),
            )
            for t in range(n):
                e0[t], e1[t], e2[t], e3[t] = _at(a0[t], a1[t], a2[t], a3[t], a4[t], a5[t])
        for r in range(nt // tiles_w):
            at = _u(24) * n + _u(r * tiles_w)
            for i in range(min(4, out_h - (first + r) * 4)):
                e = at + _u(4 * i) * n
                q0, q1, q2, q3 = z[e : e + n], z[e + n : e + 2 * n], z[e + 2 * n : e + 3 * n], z[e + 3 * n : e + 4 * n]
                _scatter(y[k, (first + r) * 4 + i], q0, q1, q2, q3, out_w)


def _scatter(row, q0, q1, q2, q3, out_w):  # type: ignore[no-untyped-def]
    """row[4 t + p] = q_p[t] for the columns inside the row."""
    full = out_w // 4
    for t in range(_u(full)):
        o = _u(4) * t
        row[o], row[o + _u(1)], row[o + _u(2)], row[o + _u(3)] = q0[t], q1[t], q2[t], q3[t]
    rest = out_w - 4 * full
    if rest > 0:
        row[4 * full] = q0[full]
    if rest > 1:
        row[4 * full + 1] = q1[full]
    if rest > 2:
        row[4 * full + 2] = q2[full]


if ENABLED:
    _g_row = compiled(_g_row, inline=True)  # type: ignore[assignment]
    _bt = compiled(_bt, inline=True)  # type: ignore[assignment]
    _at = compiled(_at, inline=True)  # type: ignore[assignment]
    _scatter = compiled(_scatter, inline=True)  # type: ignore[assignment]
weights, inputs, outputs = variant_loops(_weights, _inputs, _outputs)


@functools.cache
def warm() -> None:
    """Compile the loops (or load them from numba's cache) on tiny calls, at prepare."""
    warm_variant((weights, inputs, outputs), 36, 4, scratch_elements)
