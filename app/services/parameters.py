"""Parameter bytes a stored model shares with itself and with the other stored models, by content.

Each model's constants go through a `runtime.params.ParameterStore` (content hash of every
parameter): alone, for the bytes it repeats within itself; after each other stored model, for the
bytes that model already holds. Stored models never change, so the figures are cached by the
models' SHA-256s.
"""

from __future__ import annotations

from typing import Any

from app.errors import AppError
from app.services import graphs, library
from app.services.cache import LRU
from app.storage import ModelRecord, Storage
from runtime.params import ParameterStore

MAX_COMPARED = 20  # the most recent other models compared with; hashing is the cost
CACHE_SIZE = 32
_sharing: LRU[tuple[str, tuple[str, ...]], dict[str, Any]] = LRU(CACHE_SIZE)


def _share(store: ParameterStore, storage: Storage, record: ModelRecord) -> bool:
    """Put the model's constants through `store`; False when its graph cannot be loaded."""
    path = library.model_path(storage, record)
    dims = dict.fromkeys(record.summary.get("symbolic_dims", []), 1)  # parameters do not depend on dims
    try:
        store.share(graphs.load_graph(path, dims), model_path=path)
    except AppError:
        return False
    return True


def sharing(storage: Storage, record: ModelRecord) -> dict[str, Any]:
    """Parameter bytes of `record`, those repeated within it, and those equal to another stored model's."""
    others = [m for m in storage.list_models() if m.id != record.id and m.sha256 != record.sha256]
    others = others[:MAX_COMPARED]
    key = (record.sha256, tuple(m.sha256 for m in others))
    found = _sharing.get(key)
    if found is not None:
        return found
    alone = ParameterStore()
    if not _share(alone, storage, record):
        return {"available": False, "detail": "the model's graph cannot be loaded, so its parameters are not compared"}
    with_models: list[dict[str, Any]] = []
    for other in others:
        store = ParameterStore()
        if not _share(store, storage, other):
            continue
        before = store.unique_bytes
        _share(store, storage, record)
        shared = alone.unique_bytes - (store.unique_bytes - before)
        if shared > 0:
            with_models.append({"id": other.id, "name": other.name, "shared_bytes": shared})
    joint = ParameterStore()
    for other in others:
        _share(joint, storage, other)
    before = joint.unique_bytes
    _share(joint, storage, record)
    out = {
        "available": True,
        "parameters": len(alone.entries()),
        "parameter_bytes": alone.requested_bytes,
        "unique_bytes": alone.unique_bytes,
        "repeated_within_bytes": alone.shared_bytes,
        "shared_with_others_bytes": alone.unique_bytes - (joint.unique_bytes - before),
        "shared_with": sorted(with_models, key=lambda m: (-m["shared_bytes"], m["id"])),
        "models_compared": len(others),
    }
    return _sharing.put(key, out)
