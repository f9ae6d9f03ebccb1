"""The models library on the real app's storage: content-addressed files whose bytes hash to
the stored SHA-256 (computed here with hashlib), one record per content, and dims checked
against what the file itself declares (read here with onnx)."""

from __future__ import annotations

import hashlib

import onnx
import pytest

from app.errors import AppError
from app.services import library


def _symbolic(path) -> list[str]:
    model = onnx.load(str(path), load_external_data=False)
    return sorted({d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param})


def test_an_example_is_stored_once_as_a_file_of_its_own_bytes(client):
    storage = client.app.state.storage
    name = library.examples()[0]["name"]
    record, created = library.import_example(storage, name)
    again, created_again = library.import_example(storage, name)
    assert created and not created_again and again == record
    path = library.model_path(storage, record)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == record.sha256 and record.bytes == path.stat().st_size
    assert [m.id for m in storage.list_models()] == [record.id]
    library.remove(storage, record)
    assert not path.exists() and storage.get_model(record.id) is None


def test_an_unknown_example_is_refused_with_the_names_accepted(client):
    with pytest.raises(AppError) as caught:
        library.import_example(client.app.state.storage, "no-such-model")
    assert caught.value.status == 404
    assert all(e["name"] in caught.value.detail for e in library.examples())


def test_dims_are_checked_against_those_the_file_declares(client):
    storage = client.app.state.storage
    for example in library.examples():
        record, _ = library.import_example(storage, example["name"])
        declared = _symbolic(library.model_path(storage, record))
        library.check_dims(record, dict.fromkeys(declared, 1))  # every declared dim is accepted
        with pytest.raises(AppError) as caught:
            library.check_dims(record, {"not_a_dim": 1})
        assert caught.value.status == 422 and "'not_a_dim'" in caught.value.detail
        assert all(d in caught.value.detail for d in declared) or "every input dim is fixed" in caught.value.detail


def test_a_model_whose_file_is_gone_is_410_not_a_traceback(client):
    storage = client.app.state.storage
    record, _ = library.import_example(storage, library.examples()[0]["name"])
    storage.model_file(record).unlink()
    with pytest.raises(AppError) as caught:
        library.model_path(storage, record)
    assert caught.value.status == 410 and "upload it again" in caught.value.detail
