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

Bias and activation then go over the band's output rows by `jit_conv.epilogue`, in cache.
Loops allocate nothing and keep NaN and infinities (`_jit`'s rules); with compiled loops off
they are None and Conv keeps its im2col route.
"""

from __future__ import annotations

import functools

import numpy as np

from runtime.kernels._jit import compiled

DTYPE = np.dtype(np.float32)
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


def _inputs(x, v, zeros, saved, first_saved, t0, nt, tiles_w, ph, pw):  # type: ignore[no-untyped-def]
    """v (16, C, nt) = B^T d B for tiles [t0, t0 + nt), whole rows of `tiles_w` tiles, of
    image x (C, H, W); tile (ty, tx) reads rows 2ty - ph.. and columns 2tx - pw.., zeros
    outside the image (rows outside read `zeros`, a zero row at least W long). Rows
    [first_saved, first_saved + len(saved)) are read from `saved` (S, C, W) instead: the rows
    an output written over the image has already overwritten."""
    channels, height, width = x.shape
    first = t0 // tiles_w
    lo = min(tiles_w, (pw + 1) // 2)  # tiles [lo, hi) read no column outside the image
    hi = max(lo, min(tiles_w, (width - 4 + pw) // 2 + 1))
    for c in range(channels):
        for r in range(nt // tiles_w):
            y0 = (first + r) * 2 - ph
            r0 = _row(x, c, y0, height, zeros, saved, first_saved)
            r1 = _row(x, c, y0 + 1, height, zeros, saved, first_saved)
            r2 = _row(x, c, y0 + 2, height, zeros, saved, first_saved)
            r3 = _row(x, c, y0 + 3, height, zeros, saved, first_saved)
            base = r * tiles_w
            for tx in range(lo, hi):
                q = tx * 2 - pw
                _tile(v, c, base + tx, r0[q], r0[q + 1], r0[q + 2], r0[q + 3], r1[q], r1[q + 1], r1[q + 2],
                      r1[q + 3], r2[q], r2[q + 1], r2[q + 2], r2[q + 3], r3[q], r3[q + 1], r3[q + 2], r3[q + 3])  # fmt: skip
            for tx in range(tiles_w):
                if lo <= tx < hi:
                    continue
                q = tx * 2 - pw
                _tile(v, c, base + tx, _at(r0, q, width), _at(r0, q + 1, width), _at(r0, q + 2, width),
                      _at(r0, q + 3, width), _at(r1, q, width), _at(r1, q + 1, width), _at(r1, q + 2, width),
                      _at(r1, q + 3, width), _at(r2, q, width), _at(r2, q + 1, width), _at(r2, q + 2, width),
                      _at(r2, q + 3, width), _at(r3, q, width), _at(r3, q + 1, width), _at(r3, q + 2, width),
                      _at(r3, q + 3, width))  # fmt: skip


def _row(x, c, y, height, zeros, saved, first_saved):  # type: ignore[no-untyped-def]
    """Row y of channel c: from `saved` when it holds it, zeros outside the image."""
    if y < 0 or y >= height:
        return zeros
    if first_saved <= y < first_saved + saved.shape[0]:
        return saved[y - first_saved, c]
    return x[c, y]


def _at(row, q, width):  # type: ignore[no-untyped-def]
    return row[q] if 0 <= q < width else np.float32(0.0)


def _tile(v, c, t, d00, d01, d02, d03, d10, d11, d12, d13, d20, d21, d22, d23, d30, d31, d32, d33):  # type: ignore[no-untyped-def]
    """v[:, c, t] = B^T d B of the 4x4 tile d (rows d0., d1., d2., d3.)."""
    # rows of B^T d: (d0 - d2, d1 + d2, d2 - d1, d1 - d3), a column at a time
    a0, a1, a2, a3 = d00 - d20, d01 - d21, d02 - d22, d03 - d23
    b0, b1, b2, b3 = d10 + d20, d11 + d21, d12 + d22, d13 + d23
    e0, e1, e2, e3 = d20 - d10, d21 - d11, d22 - d12, d23 - d13
    f0, f1, f2, f3 = d10 - d30, d11 - d31, d12 - d32, d13 - d33
    # then B on the right of each row: (x0 - x2, x1 + x2, x2 - x1, x1 - x3)
    v[0, c, t], v[1, c, t], v[2, c, t], v[3, c, t] = a0 - a2, a1 + a2, a2 - a1, a1 - a3
    v[4, c, t], v[5, c, t], v[6, c, t], v[7, c, t] = b0 - b2, b1 + b2, b2 - b1, b1 - b3
    v[8, c, t], v[9, c, t], v[10, c, t], v[11, c, t] = e0 - e2, e1 + e2, e2 - e1, e1 - e3
    v[12, c, t], v[13, c, t], v[14, c, t], v[15, c, t] = f0 - f2, f1 + f2, f2 - f1, f1 - f3


def _outputs(m, y, t0, nt, tiles_w):  # type: ignore[no-untyped-def]
    """y (K, OH, OW) tile blocks = A^T M A for tiles [t0, t0 + nt), whole rows of `tiles_w`
    tiles, m (16, K, nt); the row and column past an odd edge are dropped."""
    filters, out_h, out_w = y.shape
    first = t0 // tiles_w
    full = out_w // 2  # tiles whose two columns are both inside
    for k in range(filters):
        for r in range(nt // tiles_w):
            oy = (first + r) * 2
            top = y[k, oy]
            bottom = y[k, oy + 1] if oy + 1 < out_h else top  # a copy of the top row, rewritten after
            base = r * tiles_w
            for tx in range(tiles_w):
                t = base + tx
                # s = A^T m: rows (m0 + m1 + m2, m1 - m2 - m3) of each column j
                s00 = m[0, k, t] + m[4, k, t] + m[8, k, t]
                s01 = m[1, k, t] + m[5, k, t] + m[9, k, t]
                s02 = m[2, k, t] + m[6, k, t] + m[10, k, t]
                s03 = m[3, k, t] + m[7, k, t] + m[11, k, t]
                s10 = m[4, k, t] - m[8, k, t] - m[12, k, t]
                s11 = m[5, k, t] - m[9, k, t] - m[13, k, t]
                s12 = m[6, k, t] - m[10, k, t] - m[14, k, t]
                s13 = m[7, k, t] - m[11, k, t] - m[15, k, t]
                q = tx * 2
                bottom[q] = s10 + s11 + s12
                top[q] = s00 + s01 + s02
                if tx < full:
                    bottom[q + 1] = s11 - s12 - s13
                    top[q + 1] = s01 - s02 - s03


if compiled(lambda: None) is not None:
    _store_gt = compiled(_store_gt, inline=True)  # type: ignore[assignment]
    _row = compiled(_row, inline=True)  # type: ignore[assignment]
    _at = compiled(_at, inline=True)  # type: ignore[assignment]
    _tile = compiled(_tile, inline=True)  # type: ignore[assignment]
    weights = compiled(_weights)
    inputs = compiled(_inputs)
    outputs = compiled(_outputs)
else:
    weights = inputs = outputs = None


@functools.cache
def warm() -> None:
    """Compile the loops (or load them from numba's cache) on tiny calls, at prepare."""
    if weights is None or inputs is None or outputs is None:
        return
    w = np.zeros((1, 1, 3, 3), DTYPE)
    read_only = w.view()
    read_only.flags.writeable = False
    u = np.zeros((16, 2), DTYPE)[:, :1].reshape(16, 1, 1)  # planes apart, as the kernel's are
    for src in (w, read_only):
        weights(src, u)
    image = np.zeros((1, 2, 2), DTYPE)
    image_ro = image.view()
    image_ro.flags.writeable = False
    for plane in (image, image_ro):
        inputs(plane, u, np.zeros(2, DTYPE), np.zeros((0, 1, 2), DTYPE), -1, 0, 1, 1, 1, 1)
    outputs(u, np.zeros((1, 2, 2), DTYPE), 0, 1, 1)
