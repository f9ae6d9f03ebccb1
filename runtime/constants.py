"""Constants: initializers, Constant nodes and folded results, loaded only when needed.

A `Constant` knows its shape and dtype up front and produces its value on first use:
an in-memory initializer is decoded then, external data is read from its file then, and
a folded result is computed then. So loading and planning a model with gigabytes of
weights reads none of them; only executing (or folding a node that consumes them) does.

External data is resolved strictly inside the model's folder: an absolute location, or
one that leaves the folder (``..``, a symbolic link pointing out), is refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from runtime.errors import ExternalDataError, ModelError


@dataclass
class Constant:
    """A tensor whose value does not depend on the model's inputs."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    source: str  # "initializer", "external", "node" (a Constant node) or "folded"
    _load: Callable[[], np.ndarray] | None = field(default=None, repr=False)
    _value: np.ndarray | None = field(default=None, repr=False)
    # (file, byte offset) of little-endian raw data a parameter store can memory-map
    location: tuple[str, int] | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def loaded(self) -> bool:
        return self._value is not None

    def value(self) -> np.ndarray:
        """The (read-only) array, computed or read on first call and kept."""
        if self._value is None:
            array = self.read()
            array.flags.writeable = False
            self._value = array
            self._load = None
        return self._value

    def read(self) -> np.ndarray:
        """The value, without keeping it in this Constant (a parameter store keeps it instead)."""
        if self._value is not None:
            return self._value
        assert self._load is not None
        try:
            array = np.asarray(self._load())
        except ValueError as e:  # raw bytes that do not fill the declared dims, and the like
            raise ModelError(
                f"constant {self.name!r}: its data is damaged ({e}); expected {self.dtype}{list(self.shape)}"
            ) from None
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ModelError(
                f"constant {self.name!r}: its data is {array.dtype}{list(array.shape)} "
                f"but its declared type is {self.dtype}{list(self.shape)}"
            )
        return array

    @classmethod
    def of_array(cls, name: str, array: np.ndarray, source: str = "folded") -> Constant:
        array = np.asarray(array)
        array.flags.writeable = False
        return cls(name, tuple(array.shape), array.dtype, source, None, array)

    @classmethod
    def lazy(cls, name: str, shape: tuple[int, ...], dtype: np.dtype, load: Callable[[], np.ndarray]) -> Constant:
        return cls(name, tuple(shape), np.dtype(dtype), "folded", load)


def np_dtype(elem_type: int, where: str) -> np.dtype:
    """numpy dtype of an ONNX element type; `where` names the tensor for the error."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{where}: element type {elem_type} is not a tensor type memplan knows") from None


def from_initializer(tensor: onnx.TensorProto, model_dir: str | None) -> Constant:
    """A Constant for an initializer; external data is checked now and read on first use."""
    where = f"initializer {tensor.name!r}"
    shape = tuple(int(d) for d in tensor.dims)
    dtype = np_dtype(tensor.data_type, where)
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return Constant(tensor.name, shape, dtype, "initializer", lambda: numpy_helper.to_array(tensor))
    path, offset, length = _external_location(tensor, model_dir)
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if length is not None and length != need:
        raise ExternalDataError(
            f"{where}: external data length is {length} bytes but {dtype}{list(shape)} needs {need}"
        )
    size = os.path.getsize(path)
    if offset + need > size:
        raise ExternalDataError(
            f"{where}: needs bytes [{offset}, {offset + need}) of {os.path.basename(path)!r}, which has only {size}"
        )

    def read() -> np.ndarray:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(need)
        return np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(shape)

    return Constant(tensor.name, shape, dtype, "external", read, location=(path, offset))


def _external_location(tensor: onnx.TensorProto, model_dir: str | None) -> tuple[str, int, int | None]:
    where = f"initializer {tensor.name!r}"
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location")
    if not location:
        raise ExternalDataError(f"{where}: external data has no 'location'")
    if model_dir is None:
        raise ExternalDataError(
            f"{where}: its data is in external file {location!r}, but the model was given as bytes; "
            "load it from a path (or pass base_dir) so the file can be found next to it"
        )
    if os.path.isabs(location) or location.startswith(("/", "\\")):
        raise ExternalDataError(
            f"{where}: external data location {location!r} is absolute; only paths inside the model's folder are accepted"
        )
    folder = os.path.realpath(model_dir)
    path = os.path.realpath(os.path.join(folder, location))
    if os.path.commonpath([folder, path]) != folder:
        raise ExternalDataError(
            f"{where}: external data location {location!r} points outside the model's folder; "
            "only files inside that folder are accepted"
        )
    if not os.path.isfile(path):
        raise ExternalDataError(f"{where}: external data file {location!r} does not exist next to the model")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise ExternalDataError(f"{where}: external data offset/length must be integers, got {info}") from None
    if offset < 0 or (length is not None and length < 0):
        raise ExternalDataError(f"{where}: external data offset and length must be >= 0, got {info}")
    return path, offset, length
