"""Mutated `.tflite` files (a seeded loop): refused with a `ModelError` or read whole, never another
exception, never a hang; through the REST upload, 4xx with a reason, never 5xx.

Mutations keep the TFLite identifier, so that every case reaches the `.tflite` reader: truncation, bit
flips, random bytes, and 32-bit words overwritten with hostile values (0, -1, 2**31 - 1, the file's
length, a random word), half of them aimed at the words the schema reads as offsets and lengths.
"""

from __future__ import annotations

import random
import struct
import time

import pytest

import runtime
from runtime.tflite.flat import Table, root
from tests.runtime.tflite.shared import SMALL, model_bytes

CASES = 600
SLOW_S = 2.0


def offset_words(data: bytes) -> list[int]:
    """Byte positions of the offsets and vector lengths the reader follows (root, subgraph, tensors, ops)."""
    model = root(data)
    found: list[int] = []

    def slots(table: Table, fields: range) -> None:
        found.extend(at for f in fields if (at := table.slot(f)) is not None)

    slots(model, range(8))
    for sub in model.tables(2, "subgraphs"):
        slots(sub, range(5))
        for t in sub.tables(0, "tensors"):
            slots(t, range(6))
        for op in sub.tables(3, "operators"):
            slots(op, range(6))
    for b in model.tables(4, "buffers"):
        slots(b, range(3))
    return found


def mutate(rng: random.Random, data: bytes, targets: list[int]) -> tuple[str, bytes]:
    out = bytearray(data)
    kind = rng.choice(["truncate", "bitflip", "bytes", "word", "offset"])
    if kind == "truncate":
        out = out[: rng.randrange(8, len(out))]
    elif kind == "bitflip":
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(8, len(out))] ^= 1 << rng.randrange(8)
    elif kind == "bytes":
        start = rng.randrange(8, len(out) - 1)
        out[start : start + rng.randint(1, 16)] = rng.randbytes(rng.randint(1, 16))
    else:
        at = rng.choice(targets) if kind == "offset" else rng.randrange(8, len(out) - 4) & ~3
        value = rng.choice([0, 0xFFFFFFFF, 0x7FFFFFFF, len(out), len(out) - 2, 1 << 20, rng.getrandbits(32)])
        struct.pack_into("<I", out, at, value)
    out[4:8] = b"TFL3"
    return kind, bytes(out)


def cases(n: int, seed: int) -> list[tuple[str, str, bytes]]:
    rng = random.Random(seed)
    sources = {name: model_bytes(name) for name in SMALL}
    targets = {name: offset_words(data) for name, data in sources.items()}
    out = []
    for _ in range(n):
        name = rng.choice(sorted(sources))
        kind, data = mutate(rng, sources[name], targets[name])
        out.append((name, kind, data))
    return out


def test_mutated_files_are_refused_or_read_never_crash_or_hang():
    refused = read = 0
    for name, kind, data in cases(CASES, seed=11):
        start = time.perf_counter()
        try:
            graph = runtime.load_model(data, max_tensor_bytes=1 << 26)
            runtime.memory_problem(graph, runtime.MemoryOptions(inplace=False))
            read += 1
        except runtime.ModelError as e:
            assert str(e), (name, kind)
            refused += 1
        seconds = time.perf_counter() - start
        assert seconds < SLOW_S, f"{name} ({kind}) took {seconds:.1f} s"
    assert refused > CASES // 3 and read > 0  # the mutations reach both outcomes


@pytest.fixture
def tolerant_client(make_client):
    with make_client(raise_server_exceptions=False) as c:  # a server error must come back as a 500, not raise
        yield c


def test_mutated_uploads_get_4xx_with_a_reason_never_5xx(tolerant_client):
    for name, kind, data in cases(40, seed=5):
        r = tolerant_client.post("/api/v1/models", files={"file": (f"{name}.tflite", data)})
        assert r.status_code < 500, (name, kind, r.status_code, r.text[:300])
        if r.status_code >= 400:
            assert r.json()["detail"], (name, kind)
            continue
        planned = tolerant_client.post(
            f"/api/v1/models/{r.json()['id']}/plans", json={"strategies": ["greedy_by_size"], "inplace": False}
        )
        assert planned.status_code < 500, (name, kind, planned.text[:300])
