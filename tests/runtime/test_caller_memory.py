"""Zero-copy inputs and outputs: arena views handed to the caller, caller memory bound to the
kernels, the copy counts of each path, the documented fall-backs and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from runtime import FeedError, MemoryOptions, Session, load_model
from tests.memory_models import mlp

BATCH = 3


@pytest.fixture(scope="module")
def model():
    return mlp()


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(5).standard_normal((BATCH, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def expected(model, x):
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def session(model, io: str, **options) -> Session:
    return Session(load_model(model, dims={"N": BATCH}), options=MemoryOptions(io=io), **options).prepare()


@pytest.mark.parametrize("io", ["arena", "external"])
def test_copying_path_counts_one_copy_in_and_one_out(model, x, expected, io):
    s = session(model, io)
    y = s.run({"x": x})["y"]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    # io="external" reads the fed array in place; the output is computed into a fresh array.
    assert (s.stats.copies, s.stats.copied_bytes) == ((2, x.nbytes + y.nbytes) if io == "arena" else (0, 0))


@pytest.mark.parametrize("io", ["arena", "external"])
@pytest.mark.parametrize("canary", [False, True])
def test_session_buffers_are_written_and_read_in_place(model, x, expected, io, canary):
    s = session(model, io, canary=canary)
    xin, yout = s.input_buffer("x"), s.output_buffer("y")
    for _ in range(2):  # the input is written again before every run
        xin[...] = x
        got = s.run()
        assert s.stats.copies == 0 and s.stats.copied_bytes == 0
    assert got["y"] is not None and np.shares_memory(got["y"], yout)
    np.testing.assert_allclose(yout, expected, rtol=1e-5, atol=1e-6)
    assert not yout.flags.writeable
    if io == "arena":
        assert np.shares_memory(xin, s.arena) and np.shares_memory(yout, s.arena)


def test_bound_caller_memory_is_read_and_written_without_a_copy(model, x, expected):
    s = session(model, "external")
    xb, yb = x.copy(), np.empty((BATCH, 10), np.float32)
    assert s.bind_input("x", xb).zero_copy and s.bind_output("y", yb).zero_copy
    out = s.run()
    assert out["y"] is yb
    assert (s.stats.copies, s.stats.copied_bytes, s.stats.fallbacks) == (0, 0, {})
    np.testing.assert_allclose(yb, expected, rtol=1e-5, atol=1e-6)
    xb[...] = 0  # the caller changes its input in place: the next run reads the new values
    s.run()
    np.testing.assert_allclose(yb, ReferenceEvaluator(model).run(None, {"x": xb})[0], rtol=1e-5, atol=1e-6)


def _misaligned(shape: tuple[int, ...]) -> np.ndarray:
    raw = np.zeros(int(np.prod(shape)) * 4 + 1, np.uint8)
    return raw[1:].view(np.float32).reshape(shape)


FALLBACKS = {
    "arena": ("arena", lambda x: x.copy(), "planned inside the arena (io='arena')"),
    "dtype": ("external", lambda x: x.astype(np.float64), "is float64, the model computes float32"),
    "strided": ("external", lambda x: np.repeat(x, 2, axis=1)[:, ::2], "not C-contiguous"),
    "misaligned": ("external", lambda x: _fill(_misaligned(x.shape), x), "not a multiple of 4 bytes"),
}


def _fill(target: np.ndarray, values: np.ndarray) -> np.ndarray:
    target[...] = values
    return target


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_input_fallbacks_copy_and_say_why(model, x, expected, case):
    io, make, reason = FALLBACKS[case]
    s = session(model, io)
    array = make(x)
    binding = s.bind_input("x", array)
    assert not binding.zero_copy and reason in binding.reason
    y = s.run()["y"]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert s.stats.fallbacks == {"x": binding.reason}
    copies_out = 1 if io == "arena" else 0
    assert s.stats.copies == 1 + copies_out
    assert s.stats.copied_bytes == array.nbytes + copies_out * y.nbytes


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_output_fallbacks_copy_into_caller_memory(model, x, expected, case):
    io, make, reason = FALLBACKS[case]
    s = session(model, io)
    target = make(np.zeros((BATCH, 10), np.float32))
    binding = s.bind_output("y", target)
    assert not binding.zero_copy and reason in binding.reason
    out = s.run({"x": x})
    assert out["y"] is target
    np.testing.assert_allclose(target, expected, rtol=1e-5, atol=1e-6)
    assert s.stats.copies == (2 if io == "arena" else 1)


def test_output_sharing_bytes_with_a_bound_input_is_copied(model, x):
    s = session(mlp(features=10, classes=10), "external")
    xb = np.random.default_rng(2).standard_normal((BATCH, 10)).astype(np.float32)
    expected = ReferenceEvaluator(mlp(features=10, classes=10)).run(None, {"x": xb})[0]
    assert s.bind_input("x", xb).zero_copy
    binding = s.bind_output("y", xb)  # in place of its own input: the kernels would read what they wrote
    assert not binding.zero_copy and "shares bytes with bound input 'x'" in binding.reason
    s.run()
    np.testing.assert_allclose(xb, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("call", "array", "message"),
    [
        ("bind_input", np.zeros((BATCH, 31), np.float32), "shape [3, 31]; the model expects float32[3, 32]"),
        ("bind_input", np.zeros((BATCH, 32), np.int32), "dtype int32; the model expects float32[3, 32]"),
        ("bind_output", np.zeros((BATCH, 10), np.float32)[None], "shape [1, 3, 10]"),
        ("bind_output", np.zeros((BATCH, 10), np.float32).view(), "read-only"),
    ],
)
def test_bad_bindings_name_the_tensor_and_what_is_expected(model, call, array, message):
    s = session(model, "external")
    if message == "read-only":
        array.flags.writeable = False
    with pytest.raises(FeedError, match="'[xy]'") as info:
        getattr(s, call)("x" if call == "bind_input" else "y", array)
    assert message in str(info.value)


def test_unknown_names_are_refused_with_the_accepted_ones(model):
    s = session(model, "external")
    with pytest.raises(FeedError, match=r"'nope' is not a graph input of 'mlp'; its inputs are \['x'\]"):
        s.bind_input("nope", np.zeros(1))
    with pytest.raises(FeedError, match=r"'w1' is not a graph output .*initializer.*set_shared_input"):
        s.output_buffer("w1")


def test_running_without_an_unbound_input_names_it(model):
    s = session(model, "external")
    with pytest.raises(FeedError, match=r"inputs missing \['x'\]"):
        s.run()
