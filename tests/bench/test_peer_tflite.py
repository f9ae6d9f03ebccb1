"""bench/peer_tflite.py's reading of TFLite's arena: where the graph inputs end, checked on
hand-made layouts of (index, kind, address, bytes). No TensorFlow: only the pure part is run."""

from __future__ import annotations

import pytest

BASE = 1 << 20  # an arena's address; the layouts below are offsets from it


@pytest.fixture(scope="module")
def tflite(bench_module):
    return bench_module("peer_tflite")


def layout(*tensors: tuple[int, str, int, int]) -> list[tuple[int, str, int, int]]:
    return [(index, kind, BASE + offset, size) for index, kind, offset, size in tensors]


def test_inputs_one_after_the_other_at_their_alignment_end_where_the_activations_start(tflite):
    assert tflite.TENSOR_ALIGNMENT == 64
    placed = layout(
        (0, "input", 0, 100),  # the next tensor starts at 128, the next multiple of 64
        (1, "input", 128, 64),
        (2, "intermediate", 192, 400),
        (3, "output", 592, 40),
        (4, "temporary", -4096, 800),  # in the persistent arena, below: not read
    )
    assert tflite.input_bounds(placed) == (BASE, BASE + 192)
    # No input in the arena: the activations start at its base.
    assert tflite.input_bounds(layout((2, "intermediate", 0, 400), (3, "output", 400, 40))) == (BASE, BASE)


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        pytest.param(
            [(0, "input", 0, 100), (5, "intermediate", 128, 64), (1, "input", 192, 64), (2, "intermediate", 256, 64)],
            r"tensor 5 \(intermediate\) starts at byte 128 of the arena, below the top of the graph inputs "
            r"\(tensors 0, 1\) at byte 256",
            id="an-intermediate-between-two-inputs",
        ),
        pytest.param(
            [(0, "input", 0, 100), (3, "output", 128, 64), (1, "input", 192, 64), (2, "intermediate", 256, 64)],
            r"tensor 3 \(output\) starts at byte 128",
            id="an-output-between-two-inputs",
        ),
        pytest.param(
            [(0, "input", 0, 100), (1, "input", 256, 64), (2, "intermediate", 320, 64)],
            r"the graph inputs \(tensors 0, 1\) span 320 bytes, more than their sizes rounded up to TFLite's "
            r"64-byte alignment \(192\)",
            id="a-gap-between-two-inputs",
        ),
        pytest.param(
            [(2, "intermediate", 0, 64), (0, "input", 64, 100), (3, "intermediate", 192, 64)],
            r"not at the bottom of the arena: tensor 2 \(intermediate\) starts 64 bytes below input tensor 0",
            id="an-input-above-an-intermediate",
        ),
    ],
)
def test_inputs_not_contiguous_at_the_bottom_are_refused(tflite, tensors, message):
    with pytest.raises(RuntimeError, match=message):
        tflite.input_bounds(layout(*tensors))
