"""Shared parameters: one allocation for every session holding the same bytes (two sessions of
one model, two models cut from one network), lazy shared inputs that commit no memory before
binding, one arena for several batch sizes; outputs identical to unshared runs."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest

from runtime import FeedError, ModelError, Session, load_model
from runtime.batches import BatchSessions
from runtime.params import ParameterStore, raw_data_locations
from tests.memory_models import rnn_feeds, rnn_output, rnn_step, save

V, H, N = 4000, 32, 3  # the embedding is 512,000 bytes, far above any bookkeeping
EMB_BYTES = V * H * 4


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("params")
    return {
        "step": save(rnn_step(V, H), d / "step.onnx"),
        "head": save(rnn_output(V, H), d / "head.onnx"),
        "step_ext": save(rnn_step(V, H), d / "step_ext.onnx", external=True),
        "head_ext": save(rnn_output(V, H), d / "head_ext.onnx", external=True),
    }


def traced(fn):
    """(result, bytes allocated and still held by `fn`, as tracemalloc sees them)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = fn()
        return result, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_raw_data_offsets_point_at_the_initializers_bytes(files):
    data = files["step"].read_bytes()
    model = onnx.load(str(files["step"]))
    found = raw_data_locations(files["step"])
    assert sorted(found) == sorted(t.name for t in model.graph.initializer)
    for t in model.graph.initializer:
        offset, length = found[t.name]
        assert data[offset : offset + length] == t.raw_data


@pytest.mark.parametrize("kind", ["step", "step_ext"])
def test_two_sessions_of_one_model_hold_the_weights_once(files, kind):
    feeds = rnn_feeds(N, V, H)
    expected = Session(load_model(files[kind], {"N": N})).prepare().run(feeds)["h"]
    # Unshared, each session decodes its own copy: the measurement can see a second copy.
    _, unshared = traced(lambda: [Session(load_model(files[kind], {"N": N})).prepare() for _ in range(2)])
    assert unshared >= 2 * EMB_BYTES
    store = ParameterStore()
    sessions, held = traced(lambda: [Session(store.load_model(files[kind], {"N": N})).prepare() for _ in range(2)])
    emb = [s.graph.constants["emb"].value() for s in sessions]
    assert np.shares_memory(emb[0], emb[1]) and not emb[0].flags.writeable
    assert store.unique_bytes == sum(c.nbytes for c in sessions[0].graph.constants.values())
    assert store.shared_bytes == store.unique_bytes
    # External data is mapped (no heap bytes at all); raw data at an unaligned offset inside the
    # .onnx file is copied once, aligned, for both sessions.
    assert held < store.bytes_by_origin()["decoded"] + EMB_BYTES // 4
    if kind == "step_ext":
        assert store.bytes_by_origin()["mapped"] == store.unique_bytes
    else:
        assert store.bytes_by_origin()["decoded"] <= store.unique_bytes < unshared / 2
    for s in sessions:
        np.testing.assert_array_equal(s.run(feeds)["h"], expected)


def test_models_cut_from_one_network_share_the_embedding(files):
    store = ParameterStore()
    step = store.load_model(files["step_ext"], {"N": N})
    head = store.load_model(files["head_ext"], {"N": N})
    assert step.constants["emb"].value() is head.constants["emb"].value()
    assert store.shared_bytes == EMB_BYTES
    feeds = rnn_feeds(N, V, H)
    h = Session(step).prepare().run(feeds)["h"]
    unshared_h = Session(load_model(files["step_ext"], {"N": N})).prepare().run(feeds)["h"]
    np.testing.assert_array_equal(h, unshared_h)
    probs = Session(head).prepare().run({"h": h})["probs"]
    np.testing.assert_array_equal(probs, Session(load_model(files["head"], {"N": N})).prepare().run({"h": h})["probs"])


def test_lazy_shared_input_commits_no_memory_until_bound(files):
    graph = load_model(files["step"], {"N": N})
    session, held = traced(lambda: Session(graph, unbound=["emb"]).prepare())
    assert held < EMB_BYTES // 4 and not graph.constants["emb"].loaded
    assert session.unbound == ["emb"]
    feeds = rnn_feeds(N, V, H)
    with pytest.raises(FeedError, match=r"\['emb'\] are declared unbound and not bound yet"):
        session.run(feeds)
    emb = onnx.numpy_helper.to_array(onnx.load(str(files["step"])).graph.initializer[0]).copy()
    session.set_shared_input("emb", emb)
    session.set_shared_input("emb", emb.copy())  # again with equal data: accepted
    assert np.shares_memory(session._values[session._slot["emb"]], emb)
    expected = Session(load_model(files["step"], {"N": N})).prepare().run(feeds)["h"]
    np.testing.assert_array_equal(session.run(feeds)["h"], expected)
    head = Session(load_model(files["head"], {"N": N}), unbound=["emb"]).prepare()
    head.set_shared_input("emb", emb)  # both modules read the caller's one array
    assert np.shares_memory(head._values[head._slot["emb"]], emb)


def test_lazy_shared_input_errors_name_the_tensor(files):
    session = Session(load_model(files["step"], {"N": N}), unbound=["emb"]).prepare()
    emb = np.zeros((V, H), np.float32)
    with pytest.raises(FeedError, match=r"'emb': got float32\[4000, 31\]; it is declared float32\[4000, 32\]"):
        session.set_shared_input("emb", emb[:, :31])
    with pytest.raises(FeedError, match=r"'emb': got float64"):
        session.set_shared_input("emb", emb.astype(np.float64))
    with pytest.raises(FeedError, match=r"'w' was not declared unbound; .* are \['emb'\]"):
        session.set_shared_input("w", np.zeros((H, H), np.float32))
    session.set_shared_input("emb", emb)
    with pytest.raises(FeedError, match="'emb' is already bound to different data"):
        session.set_shared_input("emb", emb + 1)
    with pytest.raises(
        ModelError, match=r"unbound=\['h_prev'\]: only initializers .* accepted: \['emb', 'w', 'u', 'b'\]"
    ):
        Session(load_model(files["step"], {"N": N}), unbound=["h_prev"]).prepare()


def test_batch_sizes_share_one_arena_and_one_copy_of_the_weights(files):
    batches = BatchSessions(files["step"], range(1, 6))
    assert batches.arena_bytes == max(batches.separate_bytes.values()) < sum(batches.separate_bytes.values())
    assert batches.params.unique_bytes * 5 == batches.params.requested_bytes
    for b in (5, 1, 3):
        feeds = rnn_feeds(b, V, H, seed=b)
        expected = Session(load_model(files["step"], {"N": b})).prepare().run(feeds)["h"]
        np.testing.assert_array_equal(batches.run(b, feeds)["h"], expected)
        assert np.shares_memory(batches.session(b).arena, batches.arena)
    with pytest.raises(ModelError, match=r"batch size 9 was not prepared; prepared sizes are \[1, 2, 3, 4, 5\]"):
        batches.session(9)
