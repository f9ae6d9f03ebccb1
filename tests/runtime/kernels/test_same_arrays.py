"""`SameArrays`, the memo of what a bound call derives from its arrays: made once for the same
array objects, again as soon as one of them is another object (even one equal in value); a
bound SqueezeExcite, 1x1 ConvAct (apart and over its input) and PointwiseConvAdd (apart and
over its residual) called with other arrays compute from them, not from the first call's."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import TensorMeta, get_kernel, loop_ufunc_buffers
from runtime.kernels.same_arrays import SameArrays


def _bound(kernel, inputs, outputs, attrs):
    """The kernel's call as a session binds it: its bind hook's, or the general call."""
    made = kernel.bind(inputs, outputs, attrs) if kernel.bind is not None else None
    return kernel.fn if made is None else made.run


def test_made_once_per_set_of_array_objects():
    made: list[tuple] = []

    def make(*arrays):
        made.append(arrays)
        return len(made)

    memo = SameArrays(make)
    a, b = np.zeros(3), np.zeros(3)
    assert memo(a, None) == 1
    assert memo(a, None) == 1
    assert memo(b, None) == 2  # equal values, another object
    assert memo(b, a) == 3
    assert memo(b, a) == 3
    assert memo(b) == 4  # fewer arrays


def test_a_bound_squeeze_excite_follows_new_arrays():
    kernel = get_kernel("SqueezeExcite", "memplan")
    assert kernel is not None and kernel.workspace is not None
    rng = np.random.default_rng(5)
    shapes = [(1, 8, 5, 5), (2, 8, 1, 1), (2,), (8, 2, 1, 1), (8,)]
    metas = [TensorMeta(s, np.dtype(np.float32)) for s in shapes]
    attrs = {"squeeze": "Relu", "gate": "Sigmoid"}
    ws = np.zeros(kernel.workspace(metas, metas[:1], **attrs), np.uint8)
    bound = _bound(kernel, metas, metas[:1], attrs)
    weights = [rng.standard_normal(s).astype(np.float32) for s in shapes[1:]]
    for _ in range(2):  # each time new input and output objects
        x = rng.standard_normal(shapes[0]).astype(np.float32)
        got, want = np.empty_like(x), np.empty_like(x)
        with loop_ufunc_buffers():
            bound(x, *weights, out=got, ws=ws, **attrs)
            kernel.fn(x, *weights, out=want, ws=None, **attrs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_bound_pointwise_conv_follows_new_arrays_apart_and_over_its_input():
    from tests.runtime.kernels.harness import conv_reference

    kernel = get_kernel("ConvAct", "memplan")
    assert kernel is not None and kernel.workspace is not None
    rng = np.random.default_rng(6)
    x_shape, w_shape = (1, 8, 6, 5), (24, 8, 1, 1)
    attrs = {"activation": "Relu"}
    w, b = rng.standard_normal(w_shape).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    metas = [TensorMeta(s, np.dtype(np.float32)) for s in (x_shape, w_shape, (24,))]
    out_meta = [TensorMeta((1, 24, 6, 5), np.dtype(np.float32))]
    ws = np.zeros(kernel.workspace(metas, out_meta, **attrs), np.uint8)
    bound = _bound(kernel, metas, out_meta, attrs)
    for over in (False, True, False):
        x = rng.standard_normal(x_shape).astype(np.float32)
        want = conv_reference(x, w, b, {}, [("Relu", {})])
        block = np.zeros(want.size, np.float32)
        block[: x.size] = x.reshape(-1)
        source = block[: x.size].reshape(x_shape) if over else x
        out = block.reshape(want.shape) if over else np.empty_like(want)
        with loop_ufunc_buffers():
            bound(source, w, b, out=out, ws=ws)  # as a session calls a bound call: no attributes
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("inner", "outer", "side"), [(16, 8, 4), (576, 96, 7)], ids=["one-band", "small-kernel-bands"])
def test_a_bound_pointwise_conv_add_follows_new_arrays(inner, outer, side):
    kernel = get_kernel("PointwiseConvAdd", "memplan")
    assert kernel is not None and kernel.workspace is not None
    rng = np.random.default_rng(7)
    shapes = [(1, inner, side, side), (outer, inner, 1, 1), (outer,), (1, outer, side, side)]
    metas = [TensorMeta(s, np.dtype(np.float32)) for s in shapes]
    ws = np.zeros(kernel.workspace(metas, metas[3:], activation="Relu"), np.uint8)
    bound = _bound(kernel, metas, metas[3:], {"activation": "Relu"})
    w, b = (rng.standard_normal(s).astype(np.float32) for s in shapes[1:3])
    for in_place in (False, True):
        x, r = (rng.standard_normal(s).astype(np.float32) for s in (shapes[0], shapes[3]))
        want = np.maximum(np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x) + b[:, None, None] + r, 0)
        out = r if in_place else np.empty_like(r)
        with loop_ufunc_buffers():
            bound(x, w, b, r, out=out, ws=ws, activation="Relu")
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
