"""Compiled loops of the quantized ONNX routes (NCHW, 8-bit), when the compiled loops are on:

* `COLUMNS`: a band of output rows' im2col columns of one image, as float32 straight from the
  8-bit input (the padding filled with the input's zero point), for float32 BLAS;
* `REQUANTIZE`: a band of integer-valued sums (float32, or int32) to the output's integers with
  TFLite's MultiplyByQuantizedMultiplier per channel, bias before, zero point and clamp after;
  `ACCUMULATE` adds a depth chunk's float32 sums into an int32 band; `DENSE`: a few rows of QGemm
  summed in int32 straight from 16-bit filters (a classifier's one row: no columns, no BLAS);
* `DEPTHWISE`: a depthwise convolution summed in float32 a channel at a time (exact: at most 256 taps
  of products under 2**16), each tap one contiguous run over the channel's phase planes, and
  requantized as it goes; its scratch is a channel's planes and sums (`SCALE_CHANNELS`: a 1x1
  one, unpadded at stride one, in integers with no scratch);
* `QUANTIZE`: QuantizeLinear with one scale in one pass (compiled without fast-math);
* `POOL`, `GLOBAL_POOL`: QLinearAveragePool and QLinearGlobalAveragePool, exact sums scaled once;
* `BINARY`, `LOOKUP`: QLinearAdd and QLinearMul over 4-D (broadcast) views and a 256-entry table
  per element, each one pass where numpy takes a temporary per step of the arithmetic; `PAIRS`:
  QLinearAdd and QLinearMul by a table of `BINARY`'s result for every pair of 8-bit values.

The requantization table `q` is `jit_conv_int.channel_table`'s: bias, multiplier and shift per
channel, then (zero point, lo, hi).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.jit import compiled as compiled_exact  # without fast-math: IEEE division, as ONNX's QuantizeLinear
from runtime.kernels._jit import compiled
from runtime.kernels.conv.jit_winograd_shared import unsigned
from runtime.kernels.quantized.jit_conv_int import MBQM, TAP_RANGE


def _scaled(x, multiplier, shift):  # pragma: no cover - compiled
    """`jit_conv_int.MBQM` (TFLite's MultiplyByQuantizedMultiplier), without branches on the value
    for a right shift and a non-negative multiplier (the usual case), so that it runs in a few
    cycles. TFLite's high half (the product plus 2**30 for a non-negative product, 1 - 2**30 for a
    negative one, divided by 2**31 truncating) is the product plus 2**30 divided by 2**31 rounding
    down, whatever the sign; its rounding division by 2**right, half away from zero, adds half less
    one for a negative value, then rounds down."""
    if shift > 0 or multiplier < 0:
        return MBQM(x, multiplier, shift)
    a = (x << 32) >> 32  # the low 32 bits, sign-extended: int32 wrap-around
    high = (a * multiplier + (np.int64(1) << 30)) >> 31
    right = -shift
    half = (np.int64(1) << right) >> 1
    return (high + half - ((high >> 63) & np.int64(right > 0))) >> right


SCALED = compiled(_scaled, inline=True)


def _requantize_run(values, bias, multiplier, shift, zero, lo, hi, out):  # pragma: no cover - compiled
    """out[i] = clamp(MBQM(values[i] + bias) + zero) along one run: the case of `_scaled` chosen once
    for the run, not per value, so that the loop vectorises."""
    if shift > 0 or multiplier < 0:
        for i in range(values.shape[0]):
            out[unsigned(i)] = min(max(MBQM(np.int64(values[unsigned(i)]) + bias, multiplier, shift) + zero, lo), hi)
        return
    for i in range(values.shape[0]):
        value = SCALED(np.int64(values[unsigned(i)]) + bias, multiplier, shift) + zero
        out[unsigned(i)] = min(max(value, lo), hi)


_REQUANTIZE_RUN = compiled(_requantize_run, inline=True)


def _columns(x, fill, geo, kh, kw, r0, r1, cols):  # pragma: no cover - compiled
    """cols[(c * kh + ky) * kw + kx, (oy - r0) * ow + ox] = x[c, iy, ix] (`fill` in the padding)."""
    stride_h, stride_w, dil_h, dil_w, top, left = geo
    channels, height, width = x.shape
    ow = cols.shape[1] // (r1 - r0)
    pad = np.float32(fill)
    if kh == kw == 1 and stride_h == stride_w == 1 and top == left == 0 and ow == width:
        # a pointwise conv's band: each channel's rows r0..r1 are one contiguous run of the input
        for c in range(channels):
            source, target = x[c].reshape(-1)[r0 * width : r1 * width], cols[c]
            for p in range(source.shape[0]):
                target[unsigned(p)] = source[unsigned(p)]
        return
    for c in range(channels):
        for ky in range(kh):
            for kx in range(kw):
                row = (c * kh + ky) * kw + kx
                shift = kx * dil_w - left
                first, last = TAP_RANGE(shift, stride_w, ow, width)  # columns whose tap is inside
                for oy in range(r0, r1):
                    base = (oy - r0) * ow
                    iy = oy * stride_h - top + ky * dil_h
                    if iy < 0 or iy >= height:
                        for ox in range(ow):
                            cols[row, base + ox] = pad
                        continue
                    for ox in range(first):
                        cols[row, base + ox] = pad
                    source, target = x[c, iy], cols[row]
                    for ox in range(first, last):
                        target[unsigned(base + ox)] = source[unsigned(ox * stride_w + shift)]
                    for ox in range(last, ow):
                        cols[row, base + ox] = pad


def _requantize(acc, q, c0, out):  # pragma: no cover - compiled
    """out[c, p] = clamp(MBQM(acc[c, p] + bias[c0 + c]) + zero) for a band of channels from c0."""
    zero, lo, hi = q[3, 0], q[3, 1], q[3, 2]
    for c in range(acc.shape[0]):
        _REQUANTIZE_RUN(acc[c], q[0, c0 + c], q[1, c0 + c], q[2, c0 + c], zero, lo, hi, out[c])


def _dense(a, filters, q, out):  # pragma: no cover - compiled
    """A few rows of QGemm: out[r, n] = clamp(MBQM(sum_k a[r, k] * filters[n, k] + bias[n]) + zero), the
    8-bit rows times 16-bit filters (B less its zero point) summed in int32 (exact where the caller
    checked that depth x 255 x 255 stays within it), reading the filters once at two bytes a weight."""
    zero, lo, hi = q[3, 0], q[3, 1], q[3, 2]
    for r in range(a.shape[0]):
        row = a[r]
        for n in range(filters.shape[0]):
            weights = filters[n]
            total = np.int32(0)
            for k in range(row.shape[0]):  # contiguous: vectorised
                total += np.int32(row[unsigned(k)]) * np.int32(weights[unsigned(k)])
            value = SCALED(np.int64(total) + q[0, n], q[1, n], q[2, n]) + zero
            out[r, n] = min(max(value, lo), hi)


def _accumulate(acc, part, first):  # pragma: no cover - compiled
    """int32 `acc` (+)= a depth chunk's float32 sums (integers, exact)."""
    for c in range(acc.shape[0]):
        for p in range(acc.shape[1]):
            acc[c, p] = np.int32(part[c, p]) if first else acc[c, p] + np.int32(part[c, p])


def phase_layout(out_h: int, out_w: int, kh: int, kw: int, geo) -> tuple[int, int, int]:
    """(phases, rows, row width) of `DEPTHWISE`'s phase planes: the padded input split by stride into
    stride_h x stride_w planes, each wide enough that every tap reads one contiguous run of it."""
    stride_h, stride_w, dil_h, dil_w = (int(v) for v in geo[:4])
    width = out_w + (kw - 1) * dil_w // stride_w
    return stride_h * stride_w, out_h + (kh - 1) * dil_h // stride_h + 1, width


def _depthwise(x, xz, w, q, geo, out, planes, acc):  # pragma: no cover - compiled
    """`x` (C, H, W), `w` (C, KH, KW) float32 less its zero point, `out` (C, OH, OW); scratch `planes`
    (`phase_layout`'s phases, rows x width) and `acc` (OH x width), float32.

    Per channel, the input less its zero point (0 in the padding) is split by stride into phase
    planes with rows of the same width as the sums', so that each tap reads one contiguous run of a
    plane at an offset (`_tap_offset`): every sum at once, the columns past OW never read back. A
    3x3 filter's nine taps are added in one pass over the sums, other filters' rows up to five taps
    of a phase at a time (every partial sum is an integer within 2**24: exact in any order)."""
    stride_h, stride_w, dil_h, dil_w, top, left = geo
    kh, kw = w.shape[1], w.shape[2]
    wide = acc.shape[0] // out.shape[1]
    flat = planes.reshape(-1)
    zero, lo, hi = q[3, 0], q[3, 1], q[3, 2]
    flat[:] = 0  # the padding: the channels write only the places inside the image, the same for each
    for c in range(x.shape[0]):
        _PHASES(x[c], xz, stride_h, stride_w, top, left, planes, wide)
        if kh == 3 and kw == 3:
            _SUM9(acc, flat, w[c], geo, planes.shape[1], wide)
        else:
            first = True
            for ky in range(kh):
                # with no dilation across, the taps of one phase (every stride-th) are adjacent in its plane
                for px in range(min(stride_w, kw) if dil_w == 1 else kw):
                    taps = (kw - px + stride_w - 1) // stride_w if dil_w == 1 else 1
                    o = _TAP_OFFSET(ky, px, geo, planes.shape[1], wide)
                    step = stride_w if dil_w == 1 else 1
                    for t in range(0, taps, 5):
                        _ROW(acc, flat, o + t, w[c, ky], px + t * step, step, min(5, taps - t), first)
                        first = False
        _PLANE(acc, wide, q[0, c], q[1, c], q[2, c], zero, lo, hi, out[c])


def _phases(x, xz, stride_h, stride_w, top, left, planes, wide):  # pragma: no cover - compiled
    """One channel's phase planes: plane (py, px) row i, column j holds x[i * stride_h + py - top,
    j * stride_w + px - left] less the zero point where that falls inside the image; the rest (the
    padding) is left as the caller zeroed it, the same places for every channel."""
    height, width = x.shape
    rows = planes.shape[1] // wide
    for py in range(stride_h):
        for px in range(stride_w):
            plane = planes[py * stride_w + px]
            first, last = TAP_RANGE(px - left, stride_w, wide, width)
            i0, i1 = TAP_RANGE(py - top, stride_h, rows, height)  # the rows inside the image
            for i in range(i0, i1):
                target = plane[i * wide : (i + 1) * wide]
                source = x[i * stride_h + py - top]
                if stride_w == 1:  # a contiguous run: vectorised
                    run = source[first + px - left : last + px - left]
                    for j in range(last - first):
                        target[unsigned(first + j)] = np.float32(run[unsigned(j)]) - xz
                elif stride_w == 2:  # a constant stride: vectorised too
                    start = first * 2 + px - left
                    for j in range(last - first):
                        target[unsigned(first + j)] = np.float32(source[unsigned(start + 2 * j)]) - xz
                else:
                    for j in range(first, last):
                        target[unsigned(j)] = np.float32(source[unsigned(j * stride_w + px - left)]) - xz


def _tap_offset(ky, kx, geo, plane_size, wide):  # pragma: no cover - compiled
    """Where tap (ky, kx)'s run starts in the flattened phase planes."""
    stride_h, stride_w, dil_h, dil_w = geo[0], geo[1], geo[2], geo[3]
    phase = (ky * dil_h % stride_h) * stride_w + kx * dil_w % stride_w
    return phase * plane_size + (ky * dil_h // stride_h) * wide + kx * dil_w // stride_w


def _sum9(acc, flat, w, geo, plane_size, wide):  # pragma: no cover - compiled
    """acc = the nine taps of a 3x3 filter `w`, in one vectorised pass."""
    o0, o1, o2 = _TAP_OFFSET(0, 0, geo, plane_size, wide), _TAP_OFFSET(0, 1, geo, plane_size, wide), \
        _TAP_OFFSET(0, 2, geo, plane_size, wide)  # fmt: skip
    o3, o4, o5 = _TAP_OFFSET(1, 0, geo, plane_size, wide), _TAP_OFFSET(1, 1, geo, plane_size, wide), \
        _TAP_OFFSET(1, 2, geo, plane_size, wide)  # fmt: skip
    o6, o7, o8 = _TAP_OFFSET(2, 0, geo, plane_size, wide), _TAP_OFFSET(2, 1, geo, plane_size, wide), \
        _TAP_OFFSET(2, 2, geo, plane_size, wide)  # fmt: skip
    k0, k1, k2, k3, k4, k5, k6, k7, k8 = w[0, 0], w[0, 1], w[0, 2], w[1, 0], w[1, 1], w[1, 2], w[2, 0], w[2, 1], w[2, 2]
    for f in range(acc.shape[0]):
        top = flat[unsigned(o0 + f)] * k0 + flat[unsigned(o1 + f)] * k1 + flat[unsigned(o2 + f)] * k2
        mid = flat[unsigned(o3 + f)] * k3 + flat[unsigned(o4 + f)] * k4 + flat[unsigned(o5 + f)] * k5
        low = flat[unsigned(o6 + f)] * k6 + flat[unsigned(o7 + f)] * k7 + flat[unsigned(o8 + f)] * k8
        acc[unsigned(f)] = top + mid + low


def _row(acc, flat, o, w, k0, step, taps, first):  # pragma: no cover - compiled
    """acc (+)= `taps` (1 to 5) adjacent taps from offset `o`, weights w[k0], w[k0 + step], ..., in one
    vectorised pass."""
    last = w.shape[0] - 1  # weights past the row's last tap are read but never used
    k, k1, k2 = w[k0], w[min(k0 + step, last)], w[min(k0 + 2 * step, last)]
    k3, k4 = w[min(k0 + 3 * step, last)], w[min(k0 + 4 * step, last)]
    n = acc.shape[0]
    if taps == 5:
        for f in range(n):
            i = o + f
            total = flat[unsigned(i)] * k + flat[unsigned(i + 1)] * k1 + flat[unsigned(i + 2)] * k2 \
                + flat[unsigned(i + 3)] * k3 + flat[unsigned(i + 4)] * k4  # fmt: skip
            acc[unsigned(f)] = total if first else acc[unsigned(f)] + total
    elif taps == 4:
        for f in range(n):
            i = o + f
            total = flat[unsigned(i)] * k + flat[unsigned(i + 1)] * k1 + flat[unsigned(i + 2)] * k2 \
                + flat[unsigned(i + 3)] * k3  # fmt: skip
            acc[unsigned(f)] = total if first else acc[unsigned(f)] + total
    elif taps == 3:
        for f in range(n):
            i = o + f
            total = flat[unsigned(i)] * k + flat[unsigned(i + 1)] * k1 + flat[unsigned(i + 2)] * k2
            acc[unsigned(f)] = total if first else acc[unsigned(f)] + total
    elif taps == 2:
        for f in range(n):
            total = flat[unsigned(o + f)] * k + flat[unsigned(o + f + 1)] * k1
            acc[unsigned(f)] = total if first else acc[unsigned(f)] + total
    else:
        for f in range(n):
            acc[unsigned(f)] = (0 if first else acc[unsigned(f)]) + flat[unsigned(o + f)] * k


def _scale_channels(x, xz, w, q, out):  # pragma: no cover - compiled
    """A 1x1 depthwise convolution (stride one, unpadded: a per-channel scale, as folded batch norms
    are), `x` and `out` (C, pixels): ``clamp(MBQM((x - xz) * w[c] + bias[c]) + zero)``, in integers."""
    zero, lo, hi = q[3, 0], q[3, 1], q[3, 2]
    for c in range(x.shape[0]):
        weight, b, m, s = np.int64(w[c]), q[0, c], q[1, c], q[2, c]
        row, target = x[c], out[c]
        for p in range(x.shape[1]):
            value = SCALED((np.int64(row[unsigned(p)]) - xz) * weight + b, m, s) + zero
            target[unsigned(p)] = min(max(value, lo), hi)


def _requantize_plane(acc, wide, bias, multiplier, shift, zero, lo, hi, out):  # pragma: no cover - compiled
    """out[oy, ox] = clamp(MBQM(acc[oy * wide + ox] + bias) + zero): one channel's sums. Rows shorter than
    a few vectors are requantized in place as one run over the sums (exact: small integers in float32),
    then copied, rather than each row's few values one at a time."""
    if out.shape[1] >= 32:
        for oy in range(out.shape[0]):
            _REQUANTIZE_RUN(acc[oy * wide : oy * wide + out.shape[1]], bias, multiplier, shift, zero, lo, hi, out[oy])
        return
    _REQUANTIZE_RUN(acc, bias, multiplier, shift, zero, lo, hi, acc)
    for oy in range(out.shape[0]):
        row, target = acc[oy * wide : oy * wide + out.shape[1]], out[oy]
        for ox in range(out.shape[1]):
            target[unsigned(ox)] = row[unsigned(ox)]


BLOCK = 256  # elements of a row whose sums `_binary` holds in its scratch at a time


def _binary(a, b, table_a, table_b, zeros, q, out, raw):  # pragma: no cover - compiled
    """QLinearAdd (`table_a` given) or QLinearMul over 4-D `a` and `b` that broadcast to `out` (an
    axis of one stretched). ADD is TFLite's: each input's rescaled value from its table (indexed by
    value + q[5]), the sum scaled by (q[0], q[1]); MUL scales ``(a - za) * (b - zb)`` (zeros) by it.
    Then the zero point q[2] and the clamp to [q[3], q[4]]. `raw` (BLOCK int64) holds a block of
    sums: read wholly before any is written, so that `out` may be an input's memory and the loops
    still vectorise (over an aliased row they would not)."""
    sa = (a.shape[0] > 1, a.shape[1] > 1, a.shape[2] > 1)
    sb = (b.shape[0] > 1, b.shape[1] > 1, b.shape[2] > 1)
    multiplier, shift, zero, lo, hi = q[0], q[1], q[2], q[3], q[4]
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            for k in range(out.shape[2]):
                row_a = a[i * sa[0], j * sa[1], k * sa[2]]
                row_b = b[i * sb[0], j * sb[1], k * sb[2]]
                target = out[i, j, k]
                for n0 in range(0, target.shape[0], raw.shape[0]):
                    count = min(raw.shape[0], target.shape[0] - n0)
                    _SUMS(row_a, row_b, table_a, table_b, zeros, q[5], n0, count, raw)
                    for n in range(count):
                        raw[unsigned(n)] = min(max(SCALED(raw[unsigned(n)], multiplier, shift) + zero, lo), hi)
                    for n in range(count):
                        target[unsigned(n0 + n)] = raw[unsigned(n)]


def _sums(row_a, row_b, table_a, table_b, zeros, offset, n0, count, raw):  # pragma: no cover - compiled
    """raw[:count] = the sums (ADD) or products (MUL) of elements n0.. of a row, each input a full
    row or one value stretched over it (a loop for each case: none branches per element)."""
    full_a, full_b = row_a.shape[0] > 1, row_b.shape[0] > 1
    if row_a.shape[0] == row_b.shape[0]:
        full_a = full_b = True
    if table_a.size > 0:  # ADD: the sum of the two rescaled values
        if full_a and full_b:
            for n in range(count):
                m = unsigned(n0 + n)
                raw[unsigned(n)] = table_a[unsigned(row_a[m] + offset)] + table_b[unsigned(row_b[m] + offset)]
            return
        one = table_b[unsigned(row_b[0] + offset)] if full_a else table_a[unsigned(row_a[0] + offset)]
        row, table = (row_a, table_a) if full_a else (row_b, table_b)
        for n in range(count):
            raw[unsigned(n)] = table[unsigned(row[unsigned(n0 + n)] + offset)] + one
        return
    za, zb = zeros[0], zeros[1]
    if full_a and full_b:  # MUL: the product less the zero points
        for n in range(count):
            m = unsigned(n0 + n)
            raw[unsigned(n)] = (np.int64(row_a[m]) - za) * (np.int64(row_b[m]) - zb)
        return
    one = np.int64(row_b[0]) - zb if full_a else np.int64(row_a[0]) - za
    row, z = (row_a, za) if full_a else (row_b, zb)
    for n in range(count):
        raw[unsigned(n)] = (np.int64(row[unsigned(n0 + n)]) - z) * one


def _pairs(a, b, table, offset, out):  # pragma: no cover - compiled
    """QLinearAdd or QLinearMul by its table of every pair of 8-bit values (`table[(a + offset) * 256 +
    b + offset]`, made by `_binary` itself), over 4-D views that broadcast to `out` as `_binary`'s do:
    one lookup per element instead of the two rescalings, the sum and the requantization. Each element
    is read before it is written at the same index, so `out` may be an input's memory."""
    sa = (a.shape[0] > 1, a.shape[1] > 1, a.shape[2] > 1)
    sb = (b.shape[0] > 1, b.shape[1] > 1, b.shape[2] > 1)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            for k in range(out.shape[2]):
                row_a = a[i * sa[0], j * sa[1], k * sa[2]]
                row_b = b[i * sb[0], j * sb[1], k * sb[2]]
                target = out[i, j, k]
                if row_a.shape[0] == row_b.shape[0]:
                    for n in range(target.shape[0]):
                        m = unsigned(n)
                        target[m] = table[unsigned((np.int64(row_a[m]) + offset) * 256 + np.int64(row_b[m]) + offset)]
                elif row_b.shape[0] == 1:  # B stretched over the row: a column of the table
                    column = np.int64(row_b[0]) + offset
                    for n in range(target.shape[0]):
                        target[unsigned(n)] = table[unsigned((np.int64(row_a[unsigned(n)]) + offset) * 256 + column)]
                else:  # A stretched over the row: a row of the table
                    base = (np.int64(row_a[0]) + offset) * 256 + offset
                    for n in range(target.shape[0]):
                        target[unsigned(n)] = table[unsigned(base + np.int64(row_b[unsigned(n)]))]


def _quantize(x, scale, zero, lo, hi, out):  # pragma: no cover - compiled
    """QuantizeLinear with one scale, as ONNX defines it in float32: out = clamp(rint(x / scale) + zero)
    (IEEE division and ties to even: compiled without fast-math), a NaN to the least value.

    `out` may be over x's first bytes (a narrower type, planned in place): elements go in order, in
    runs [start, end) that grow by the ratio of the two item sizes, so that from the second run on
    the bytes a run writes lie below those it reads. The compiler vectorises a loop only after
    checking that its two arrays' ranges are apart: one pass over all of x overlapping out ran
    element by element, several times slower, where each run after the first short one passes the check."""
    n = x.shape[0]
    grow = max(2, x.itemsize // out.itemsize)
    start, end = 0, min(n, 16)
    while start < n:
        _QUANTIZE_RUN(x[start:end], scale, zero, lo, hi, out[start:end])
        start, end = end, min(n, end * grow)


def _quantize_run(x, scale, zero, lo, hi, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        value = np.rint(x[i] / scale) + zero
        value = value if value >= lo else lo  # a NaN fails the comparison: the least value
        out[i] = value if value <= hi else hi


def _lookup(x, table, flip, out):  # pragma: no cover - compiled
    """out = table[x ^ flip] over 8-bit values read as unsigned bytes (`flip` 128 turns an int8 value's
    byte into its place in a table from -128): a byte index, which the compiler keeps scalar and fast."""
    for i in range(x.shape[0]):
        out[i] = table[x[i] ^ flip]


# Any: each is None with compiled loops off, which its callers check once (`qlinear_routes.ON`, ...)
def _pool(x, zero, ratio, geo, kh, kw, include_pad, q, out):  # pragma: no cover - compiled
    """QLinearAveragePool (2-D, NCHW): each window's sum less the zero point, exactly, times
    ``ratio / count`` (the taps inside the image, or all with `include_pad`), rounded half to even,
    plus the zero point q[0], clamped to [q[1], q[2]]. A 3x3 window wholly inside the image (most of
    them) is summed in one pass along its row, the border's windows one at a time."""
    stride_h, stride_w, top, left = geo[0], geo[1], geo[4], geo[5]
    height, width = x.shape[1], x.shape[2]
    ow = out.shape[2]
    # the columns whose 3x3 window is inside: 0 <= ox * stride_w - left and ox * stride_w - left + 3 <= width
    inner0 = min(ow, (left + stride_w - 1) // stride_w)
    inner1 = max(inner0, min(ow, (width - 3 + left) // stride_w + 1)) if kh == kw == 3 else inner0
    for c in range(x.shape[0]):
        for oy in range(out.shape[1]):
            y0 = oy * stride_h - top
            ky0, ky1 = TAP_RANGE(y0, 1, kh, height)
            lo, hi = (inner0, inner1) if ky1 - ky0 == 3 else (0, 0)
            if hi > lo:
                r0, r1, r2, target = x[c, y0], x[c, y0 + 1], x[c, y0 + 2], out[c, oy]
                for ox in range(lo, hi):
                    i = ox * stride_w - left
                    a, b, d = unsigned(i), unsigned(i + 1), unsigned(i + 2)
                    total = np.int64(r0[a]) + np.int64(r0[b]) + np.int64(r0[d]) + np.int64(r1[a]) + np.int64(r1[b]) \
                        + np.int64(r1[d]) + np.int64(r2[a]) + np.int64(r2[b]) + np.int64(r2[d]) - zero * 9  # fmt: skip
                    value = np.int64(np.rint(np.float64(total) * ratio / 9)) + q[0]
                    target[unsigned(ox)] = min(max(value, q[1]), q[2])
            for ox in range(ow):
                if lo <= ox < hi:
                    continue
                x0 = ox * stride_w - left
                kx0, kx1 = TAP_RANGE(x0, 1, kw, width)
                total = np.int64(0)
                for ky in range(ky0, ky1):
                    row = x[c, y0 + ky]
                    for kx in range(kx0, kx1):
                        total += np.int64(row[unsigned(x0 + kx)])
                inside = (ky1 - ky0) * (kx1 - kx0)
                total -= zero * inside
                count = kh * kw if include_pad else inside
                value = np.int64(np.rint(np.float64(total) * ratio / max(count, 1))) + q[0]
                out[c, oy, ox] = min(max(value, q[1]), q[2])


def _global_pool(x, zero, ratio, q, out):  # pragma: no cover - compiled
    """QLinearGlobalAveragePool over (rows, pixels) `x` into `out` (rows,): as `_pool`'s."""
    count = x.shape[1]
    for r in range(x.shape[0]):
        total = np.int64(0)
        for i in range(count):
            total += np.int64(x[r, unsigned(i)])
        value = np.int64(np.rint(np.float64(total - zero * count) * ratio / count)) + q[0]
        out[r] = min(max(value, q[1]), q[2])


POOL: Any = compiled(_pool)
GLOBAL_POOL: Any = compiled(_global_pool)
COLUMNS: Any = compiled(_columns)
REQUANTIZE: Any = compiled(_requantize)
ACCUMULATE: Any = compiled(_accumulate)
DENSE: Any = compiled(_dense)
_PLANE: Any = compiled(_requantize_plane)
_PHASES: Any = compiled(_phases, inline=True)
_TAP_OFFSET: Any = compiled(_tap_offset, inline=True)
_SUM9: Any = compiled(_sum9, inline=True)
_ROW: Any = compiled(_row, inline=True)
DEPTHWISE: Any = compiled(_depthwise)
SCALE_CHANNELS: Any = compiled(_scale_channels)
_SUMS: Any = compiled(_sums, inline=True)
BINARY: Any = compiled(_binary)
PAIRS: Any = compiled(_pairs)
LOOKUP: Any = compiled(_lookup)
_QUANTIZE_RUN: Any = compiled_exact(_quantize_run, error_model="numpy")
QUANTIZE: Any = compiled_exact(_quantize, error_model="numpy")
