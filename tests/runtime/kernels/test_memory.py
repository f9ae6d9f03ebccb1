"""Kernels keep their temporaries small: memplan reports every byte numpy allocates outside
the arena, so a kernel that silently built a tensor-sized temporary would spoil the
measurement. numpy reports its buffers to tracemalloc, which is the meter here."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from runtime.kernels import TensorMeta, get_kernel
from tests.runtime.kernels.harness import close, one_node, run_ort, run_with_workspace

SHAPE = (4, 64, 64, 64)  # 1 Mi elements: 4 MiB of float32
LIMIT = 1 << 20  # a tensor-sized temporary would be 4x this
RNG = np.random.default_rng(3)
X = RNG.standard_normal(SHAPE).astype(np.float32)
C = RNG.standard_normal((64, 1, 1)).astype(np.float32)
I64 = np.int64


def _case(op, inputs, out_shape=SHAPE, dtype=np.float32, **attrs):
    return pytest.param(op, inputs, out_shape, dtype, attrs, id=f"{op}-{'-'.join(map(str, attrs.values()))}")


CASES = [
    *(_case(op, [X]) for op in ["Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Gelu", "HardSwish", "HardSigmoid"]),
    *(_case(op, [X]) for op in ["LeakyRelu", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "Identity"]),
    *(_case(op, [X, C]) for op in ["Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Max", "Min", "Sum"]),
    _case("Gelu", [X], approximate="tanh"),
    _case("Div", [X.astype(np.int32), np.full((64, 1, 1), -3, np.int32)], dtype=np.int32),
    _case("Mod", [X.astype(np.int32), np.full((64, 1, 1), -3, np.int32)], dtype=np.int32),
    _case("Clip", [X, np.float32(-1), np.float32(1)]),
    _case("Where", [X > 0, X, C]),
    _case("Less", [X, C], dtype=np.bool_),
    _case("Softmax", [X], opset=13, axis=-1),
    _case("LogSoftmax", [X], opset=13, axis=1),
    _case("Softmax", [X], opset=11, axis=1),
    _case("Reshape", [X, np.array([4, -1], I64)], out_shape=(4, 64**3)),
    _case("Transpose", [X], out_shape=(4, 64, 64, 64), perm=[0, 2, 3, 1]),
    _case("Concat", [X, X], out_shape=(8, 64, 64, 64), axis=0),
    _case("Slice", [X, np.array([1], I64), np.array([63], I64), np.array([2], I64)], out_shape=(4, 64, 62, 64)),
    _case("Pad", [X, np.array([0, 0, 1, 1, 0, 0, 1, 1], I64)], out_shape=(4, 64, 66, 66)),
    _case("Pad", [X, np.array([0, 0, 1, 1, 0, 0, 1, 1], I64)], out_shape=(4, 64, 66, 66), mode="reflect"),
    _case("Tile", [X[:, :, :32], np.array([1, 1, 2, 1], I64)]),
    _case("Expand", [C, np.array(SHAPE, I64)]),
    _case("Gather", [X, np.arange(0, 64, 2)], out_shape=(4, 32, 64, 64), axis=1),
    _case("Cast", [X], dtype=np.float16, to=10),
    _case("ReduceSum", [X, np.array([2, 3], I64)], out_shape=(4, 64, 1, 1)),
    _case("ReduceMean", [X, np.array([1], I64)], out_shape=(4, 1, 64, 64)),
    _case("ReduceMax", [X, np.array([-1], I64)], out_shape=(4, 64, 64, 1)),
    _case("ArgMax", [X], out_shape=(4, 64, 64, 1), dtype=np.int64, axis=3),
]


@pytest.mark.parametrize(("op", "inputs", "out_shape", "dtype", "attrs"), CASES)
def test_kernel_allocates_less_than_a_quarter_of_its_output(op, inputs, out_shape, dtype, attrs):
    k = get_kernel(op)
    out = np.empty(out_shape, dtype=dtype)
    if k.prepare is not None:  # as a session does: compiled loops are built here, not in the call
        metas = [TensorMeta(np.shape(x), np.asarray(x).dtype) for x in inputs]
        k.prepare(metas, [TensorMeta(out.shape, out.dtype)], **{a: v for a, v in attrs.items() if a != "opset"})
    was_tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]  # measure from here, whoever started tracing
    try:
        with np.errstate(all="ignore"):
            k.fn(*inputs, out=out, **attrs)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not was_tracing:
            tracemalloc.stop()
    assert peak < LIMIT, f"{op} allocated {peak} bytes outside its output"


@pytest.mark.parametrize("op", ["Sum", "Max", "Min"])
@pytest.mark.parametrize("alias", [0, 1])
def test_variadic_ops_in_place_copy_nothing(op, alias):
    # The planner lets output 0 overwrite input 0 or 1; the kernel must not undo the saving
    # with a copy of the overwritten input.
    rng = np.random.default_rng(alias)
    xs = [rng.standard_normal((256, 256)).astype(np.float32) for _ in range(3)]
    xs_before = xs[alias].copy()
    want = {
        "Sum": xs[0] + xs[1] + xs[2],
        "Max": np.maximum(np.maximum(xs[0], xs[1]), xs[2]),
        "Min": np.minimum(np.minimum(xs[0], xs[1]), xs[2]),
    }[op]
    out = xs[alias]
    small = [x[:2, :2].copy() for x in xs]
    was_tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    peaks = []
    try:
        get_kernel(op).fn(*small, out=small[alias])  # a first traced call sets numpy's machinery up
        for repeat in range(3):  # the least of three: a stray allocation elsewhere is not the kernel's
            if repeat:
                np.copyto(out, xs_before)
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            get_kernel(op).fn(*xs, out=out)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
    finally:
        if not was_tracing:
            tracemalloc.stop()
    peak = min(peaks)
    np.testing.assert_array_equal(out, want)
    assert peak < out.nbytes // 16, f"{op} in place allocated {peak} bytes"


def _weights(rng: np.random.Generator, *shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {f"w{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}


@pytest.mark.parametrize(
    ("op", "shape", "weights", "attrs"),
    [
        ("Conv", (1, 32, 28, 28), [(32, 32, 3, 3)], {"pads": [1, 1, 1, 1]}),
        ("Conv", (1, 32, 56, 56), [(32, 32, 3, 3)], {"pads": [1, 1, 1, 1]}),
        ("Conv", (2, 32, 28, 28), [(32, 32, 1, 1)], {"strides": [2, 2]}),
        ("Conv", (1, 32, 28, 28), [(32, 1, 3, 3)], {"pads": [1, 1, 1, 1], "group": 32}),
        ("ConvTranspose", (1, 16, 28, 28), [(16, 8, 4, 4)], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", (1, 32, 28, 28), [], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ("AveragePool", (1, 32, 28, 28), [], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", (1, 16, 112, 112), [], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("BatchNormalization", (2, 32, 28, 28), [(32,)] * 4, {}),
        ("LayerNormalization", (4, 64, 256), [(256,), (256,)], {}),
        ("InstanceNormalization", (2, 32, 28, 28), [(32,), (32,)], {}),
        ("LRN", (1, 32, 28, 28), [], {"size": 5}),
        ("Gemm", (256, 512), [(512, 256), (256,)], {}),
        ("MatMul", (8, 128, 256), [(256, 128)], {}),
        ("GlobalAveragePool", (1, 1000, 13, 13), [], {}),
        ("GlobalMaxPool", (1, 1000, 13, 13), [], {}),
    ],
)
def test_kernels_allocate_little_outside_the_workspace(op, shape, weights, attrs):
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), **_weights(rng, *weights)}
    if op == "BatchNormalization":
        feeds["w3"] = np.abs(feeds["w3"])  # a variance
    model = one_node(op, feeds, **attrs)
    expected = run_ort(model, feeds)
    inputs = list(feeds.values())
    run_with_workspace(model, inputs, expected, "exact")  # warm up numpy's caches
    tracemalloc.start()
    try:
        got, size = run_with_workspace(model, inputs, expected, "exact")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    close(got, expected, rtol=1e-3, atol=1e-4)
    # The test's own output and workspace arrays are counted too. Beyond them the kernel may
    # use numpy's ufunc buffers for strided or broadcast operands (kept at 2048 elements by
    # small_ufunc_buffers), never memory that grows with the tensor.
    own = sum(o.nbytes for o in got) + size
    assert peak - own <= 24 * 1024, f"{op} allocated {peak - own} bytes outside out/ws ({own} bytes)"


STRICT = 64 * 1024  # the executor's bound beside the arena, for a whole model
STRICT_CASES = [
    *(_case(op, [X]) for op in ["Gelu", "Erf", "HardSwish", "LeakyRelu", "Elu", "Softplus", "Mish", "Sigmoid"]),
    _case("Gelu", [X], approximate="tanh"),
    *(_case(op, [X, C]) for op in ["Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Max", "Less"]),
    _case("Softmax", [X], opset=13, axis=-1),
    _case("Softmax", [X], opset=11, axis=1),
    _case("LogSoftmax", [X], opset=13, axis=1),
    _case("ReduceMean", [X, np.array([1], I64)], out_shape=(4, 1, 64, 64)),
    _case("Pad", [X, np.array([0, 0, 1, 1, 0, 0, 1, 1], I64)], out_shape=(4, 64, 66, 66), mode="reflect"),
    _case(
        "Einsum", [X.reshape(64, 128, 128), X.reshape(64, 128, 128)], out_shape=(64, 128, 128), equation="bij,bjk->bik"
    ),
    _case("LpNormalization", [X], axis=-1, p=1),  # the norms in the workspace, zeros kept without a mask
    _case("LpNormalization", [X], axis=1, p=2),
]


@pytest.mark.parametrize(("op", "inputs", "out_shape", "dtype", "attrs"), STRICT_CASES)
def test_kernel_with_its_workspace_allocates_under_64_kib(op, inputs, out_shape, dtype, attrs):
    # With the workspace the planner gives it (and in place where the kernel allows it), a
    # kernel's temporaries live in the arena: what numpy allocates beside it stays small and
    # does not grow with the tensor (4 MiB here).
    peak = bytes_beside(op, inputs, out_shape, dtype, attrs)
    assert peak <= STRICT, f"{op} allocated {peak:,} bytes beside its output and workspace"


def bytes_beside(op: str, inputs: list, out_shape: tuple, dtype: type, attrs: dict) -> int:
    """Peak bytes numpy allocates during one call of `op`'s kernel beside its output and the workspace
    it declares (in place where the kernel allows it), after a first call for numpy's own setup.
    `python bench/kernel_memory_bench.py` prints it for STRICT_CASES."""
    k = get_kernel(op)
    out = np.empty(out_shape, dtype=dtype)
    extra = {}
    if k.workspace is not None:
        metas = [TensorMeta(np.shape(x), np.asarray(x).dtype) for x in inputs]
        size = k.workspace(
            metas, [TensorMeta(out.shape, out.dtype)], **{a: v for a, v in attrs.items() if a != "opset"}
        )
        extra["ws"] = np.full(size, 0xFF, np.uint8)
    in_place = 0 in k.inplace and out.shape == inputs[0].shape and out.dtype == inputs[0].dtype
    args = [x.copy() if i == 0 and in_place else x for i, x in enumerate(inputs)]
    target = args[0] if in_place else out
    with np.errstate(all="ignore"):
        k.fn(*args, out=target, **attrs, **extra)  # numpy's first-call setup is not the kernel's
        args = [x.copy() if i == 0 and in_place else x for i, x in enumerate(inputs)]
        target = args[0] if in_place else out
        was_tracing = tracemalloc.is_tracing()
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        try:
            k.fn(*args, out=target, **attrs, **extra)
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            if not was_tracing:
                tracemalloc.stop()
