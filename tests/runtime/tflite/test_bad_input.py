"""Damaged and unsupported `.tflite` files: refused with a `ModelError` naming the field, before allocating.

Each case patches one field of a real model (found by walking the file, so the patch lands where the
schema says) or builds a small model with the `flatbuffers` builder.
"""

from __future__ import annotations

import importlib
import struct

import flatbuffers
import pytest

import runtime
from runtime.tflite.flat import Table, root
from tests.runtime.tflite.shared import model_bytes


def patched(data: bytes, find, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    at = find(root(data))
    struct.pack_into("<" + fmt, out, at, value)
    return bytes(out)


def subgraph(model: Table) -> Table:
    return model.tables(2, "subgraphs")[0]


def refused(data: bytes, match: str, error: type[Exception] = runtime.ModelError) -> str:
    with pytest.raises(error, match=match) as caught:
        runtime.load_model(data)
    return str(caught.value)


def test_truncated_files_name_what_runs_past_the_end():
    data = model_bytes("micro_speech_quantized")
    for length in (8, 12, 100, len(data) // 2, len(data) - 1):
        message = refused(data[:length], "")
        assert any(w in message for w in ("past the end", "outside the file", "fit in the file", "too few")), message


def test_an_unsupported_schema_version_is_named():
    data = patched(model_bytes("hello_world_int8"), lambda m: m.slot(0), "I", 2)
    refused(data, r"model.version: TFLite schema version 2 is not supported; memplan reads schema version 3")


def test_a_buffer_index_out_of_range_is_named():
    data = patched(model_bytes("hello_world_int8"), lambda m: subgraph(m).tables(0, "tensors")[4].slot(2), "I", 9999)
    refused(data, r"subgraphs\[0\]\.tensors\[4\].*buffer: 9999 is out of range \(the model has \d+ buffers\)")


def test_an_operator_code_index_out_of_range_is_named():
    def last_opcode(m: Table) -> int:  # an opcode_index of 0 is the default and may be left out
        return next(at for op in reversed(subgraph(m).tables(3, "operators")) if (at := op.slot(0)) is not None)

    data = patched(model_bytes("micro_speech_quantized"), last_opcode, "I", 77)
    refused(data, r"operators\[3\]\.opcode_index: 77 is out of range \(the model has 4 operator codes\)")


def test_a_tensor_index_out_of_range_in_an_operator_is_named():
    def first_input(m: Table) -> int:
        op = subgraph(m).tables(3, "operators")[0]
        at = op.slot(1)
        return at + struct.unpack_from("<I", m.buf, at)[0] + 4

    data = patched(model_bytes("hello_world_int8"), first_input, "i", 4096)
    refused(data, r"operators\[0\]\.inputs\[0\]: tensor index 4096 is out of range \(the subgraph has 10 tensors\)")


def test_a_shape_past_the_size_limit_is_refused_before_allocating():
    def first_dim(m: Table) -> int:
        tensor = subgraph(m).tables(0, "tensors")[7]
        at = tensor.slot(0)
        return at + struct.unpack_from("<I", m.buf, at)[0] + 4

    data = patched(model_bytes("hello_world_int8"), first_dim, "i", 2_000_000_000)
    message = refused(data, "refused before allocating", runtime.TensorTooLargeError)
    assert "tensors[7]" in message and "2000000000" in message


def test_a_vector_length_past_the_file_is_named():
    def tensors_length(m: Table) -> int:
        at = subgraph(m).slot(0)
        return at + struct.unpack_from("<I", m.buf, at)[0]

    data = patched(model_bytes("hello_world_int8"), tensors_length, "I", 0x7FFFFFFF)
    refused(data, r"subgraphs\[0\]\.tensors: a vector of 2,147,483,647 elements .* runs past the end of the file")


def test_a_root_offset_outside_the_file_is_named():
    data = bytearray(model_bytes("hello_world_int8"))
    struct.pack_into("<I", data, 0, len(data) + 64)
    refused(bytes(data), r"model: the table offset \d+ is outside the file")


def built(subgraphs: int, version: int = 3) -> bytes:
    """A model with `subgraphs` subgraphs of one float tensor each and no operators."""
    module = {n: importlib.import_module(f"tflite.{n}") for n in ("Model", "SubGraph", "Tensor", "Buffer")}
    b = flatbuffers.Builder(256)
    module["Buffer"].BufferStart(b)
    buffer = module["Buffer"].BufferEnd(b)
    graphs = []
    for _ in range(subgraphs):
        name = b.CreateString("x")
        module["Tensor"].TensorStartShapeVector(b, 1)
        b.PrependInt32(4)
        shape = b.EndVector()
        module["Tensor"].TensorStart(b)
        module["Tensor"].TensorAddShape(b, shape)
        module["Tensor"].TensorAddName(b, name)
        tensor = module["Tensor"].TensorEnd(b)
        module["SubGraph"].SubGraphStartTensorsVector(b, 1)
        b.PrependUOffsetTRelative(tensor)
        tensors = b.EndVector()
        ios = []
        for _ in range(2):
            module["SubGraph"].SubGraphStartInputsVector(b, 1)
            b.PrependInt32(0)
            ios.append(b.EndVector())
        module["SubGraph"].SubGraphStart(b)
        module["SubGraph"].SubGraphAddTensors(b, tensors)
        module["SubGraph"].SubGraphAddInputs(b, ios[0])
        module["SubGraph"].SubGraphAddOutputs(b, ios[1])
        graphs.append(module["SubGraph"].SubGraphEnd(b))
    module["Model"].ModelStartSubgraphsVector(b, len(graphs))
    for g in reversed(graphs):
        b.PrependUOffsetTRelative(g)
    vector = b.EndVector()
    module["Model"].ModelStartBuffersVector(b, 1)
    b.PrependUOffsetTRelative(buffer)
    buffers = b.EndVector()
    module["Model"].ModelStart(b)
    module["Model"].ModelAddVersion(b, version)
    module["Model"].ModelAddSubgraphs(b, vector)
    module["Model"].ModelAddBuffers(b, buffers)
    b.Finish(module["Model"].ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def test_several_subgraphs_are_refused_clearly():
    graph = runtime.load_model(built(1))  # the same model with one subgraph reads
    assert graph.inputs == graph.outputs == ("x",) and graph.tensors["x"].shape == (4,)
    refused(built(3), r"model.subgraphs: the model has 3 subgraphs; memplan reads single-subgraph models only .*WHILE")


def test_dims_cannot_be_bound_on_a_tflite_model():
    with pytest.raises(runtime.ShapeError, match="no symbolic dims"):
        runtime.load_model(built(1), {"batch": 2})
