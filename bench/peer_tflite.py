"""TensorFlow Lite's arena for one ONNX model: the TFLite column of bench/peer_bench.py.

Bench-only, like the TVM column: TensorFlow (``tensorflow-cpu==2.21.0``) and onnx2tf
(``onnx2tf==2.6.9`` with its requirements) are installed into a folder of their own, never beside
memplan, and this script appends that folder to ``sys.path`` (after memplan's own packages, so
that memplan's numpy, onnx and protobuf are the ones imported). peer_bench runs it in a child
process per model, so that a crash or a slow conversion is one cell of the table:

    python bench/peer_tflite.py MODEL.onnx [--tflite-path FOLDER]   # prints one JSON line
    python bench/peer_tflite.py --check [--tflite-path FOLDER]      # the hand-worked chain

How a model is measured:
1. The ONNX file is copied into a temporary folder (onnx2tf rewrites the file it is given), its
   constant subgraphs folded by onnxsim (the light models compute their weights with
   ConstantOfShape, which onnx2tf would otherwise keep as custom ops), and onnx2tf's default
   backend writes a float32 ``.tflite`` directly (no quantisation, so no calibration data).
2. ``tf.lite.Interpreter`` loads it without any delegate (the default XNNPACK delegate would
   allocate its own memory beside the arena), one thread, and ``allocate_tensors()`` runs
   TFLite's ArenaPlanner: once with the builtin reference kernels (``BUILTIN_REF``), the table's
   figure, and once with the optimized builtin ones (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``),
   whose Conv asks for an im2col temporary that the planner places among the activations.
3. The interpreter does not tell Python its arena's size, so the plan is read from the tensors:
   each non-constant tensor is a numpy view (``interpreter.tensor(i)()``) at the arena's base plus
   the offset the planner gave it. Constants (with data in the model's flatbuffer) point into the
   model, variables (recurrent states) into the persistent arena: both are skipped, and so are
   kernels' temporaries, some of which sit in the persistent arena too (BatchMatMul's transposed
   constants) where Python cannot tell them apart. The planner puts the tensors alive for the
   whole run, the graph inputs, at the bottom of the arena.
   - ``bytes``, the activations: from the top of the graph inputs to the highest end of an
     intermediate tensor (neither a graph input nor an output), the form memplan's like-for-like
     column counts. Holes left below that top for outputs or temporaries count: that is where
     TFLite put the activations.
   - ``arena``: from the base to the highest end of the graph's tensors, inputs and outputs
     included (temporaries not).
   The reading is checked: the inputs are at the lowest address, one after the other (no
   intermediate or output starts below their top, and they span no more than their sizes each
   rounded up to TFLite's 64-byte tensor alignment); two tensors alive at one op
   (lifetimes from the op list) share no byte unless an op writes one over the other (TFLite's
   in-place ops); the arena is no larger than the sum of the sizes of the tensors read.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

CHAIN_ELEMENTS = 1024  # float32: 4,096 bytes per tensor
RESOLVERS = {
    "reference": lambda kinds: kinds.BUILTIN_REF,
    "optimized": lambda kinds: kinds.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
}
KINDS = ("input", "output", "intermediate", "temporary")
# kDefaultTensorAlignment (tensorflow/lite/util.h): the ArenaPlanner starts every tensor of its
# arena at a multiple of 64 bytes, so two inputs one after the other leave less than 64 between them.
TENSOR_ALIGNMENT = 64


def to_tflite(path: Path, folder: Path) -> Path:
    """Step 1: a float32 .tflite of the ONNX model at `path`, written under `folder`."""
    import onnx
    import onnx2tf
    import onnxsim

    copy = folder / f"{path.stem}.onnx"
    shutil.copyfile(path, copy)
    model, ok = onnxsim.simplify(onnx.load(str(copy)))
    if not ok:
        raise RuntimeError(f"{path.name}: onnxsim's check of the folded model failed")
    onnx.save(model, str(copy))
    onnx2tf.convert(
        input_onnx_file_path=str(copy), output_folder_path=str(folder), not_use_onnxsim=True, non_verbose=True
    )
    return folder / f"{path.stem}_float32.tflite"


def placed_tensors(content: bytes, resolver: str) -> tuple[object, list[tuple[int, str, int, int]]]:
    """Step 2: the model's flatbuffer graph, and (index, kind, address, bytes) of every
    non-constant tensor with bytes after `allocate_tensors()` with the builtin kernels of
    `resolver`; kind is input, output, intermediate or temporary (a kernel's, added at prepare)."""
    import tensorflow as tf
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(content, 0)
    if len(model.subgraphs) != 1:
        raise RuntimeError(f"{len(model.subgraphs)} subgraphs: only the first one's arena would be read")
    graph = model.subgraphs[0]
    skipped = {i for i, t in enumerate(graph.tensors) if t.isVariable or model.buffers[t.buffer].data is not None}
    inputs, outputs = set(graph.inputs.tolist()), set(graph.outputs.tolist())
    interpreter = tf.lite.Interpreter(
        model_content=content,
        experimental_op_resolver_type=RESOLVERS[resolver](tf.lite.experimental.OpResolverType),
        num_threads=1,
    )
    interpreter.allocate_tensors()
    placed = []
    # get_tensor_details leaves out tensors without a shape, whose views would crash.
    for detail in interpreter.get_tensor_details():
        index = detail["index"]
        view = None if index in skipped else interpreter.tensor(index)()
        if view is not None and view.nbytes:
            kind = "input" if index in inputs else "output" if index in outputs else "intermediate"
            placed.append((index, "temporary" if index >= len(graph.tensors) else kind, view.ctypes.data, view.nbytes))
    return graph, placed


def check_no_overlap(graph: object, placed: list[tuple[int, str, int, int]]) -> None:
    """Two tensors alive at one op never share a byte, unless an op writes one over the other
    (TFLite's in-place ops: the input's last op is the output's first). Lifetimes from the op
    list; graph inputs live from the start, outputs to the end."""
    first = {int(i): -1 for i in graph.inputs}
    last = {int(i): len(graph.operators) for i in graph.outputs}
    for step, op in enumerate(graph.operators):
        for i in op.outputs.tolist():
            first.setdefault(i, step)
        for i in op.inputs.tolist():
            last[i] = max(last.get(i, step), step)
    life = {index: (first.get(index, -1), last.get(index, first.get(index, -1))) for index, *_ in placed}
    ranked = sorted((start, start + size, index) for index, kind, start, size in placed if kind != "temporary")
    for k, (_, end, a) in enumerate(ranked):
        for other_start, _, b in ranked[k + 1 :]:
            if other_start >= end:
                break
            (a_first, a_last), (b_first, b_last) = life[a], life[b]
            in_place = a_last == b_first or b_last == a_first
            if a_first <= b_last and b_first <= a_last and not in_place:
                raise RuntimeError(f"tensors {a} and {b} share bytes while both are alive: the reading is wrong")


def input_bounds(placed: list[tuple[int, str, int, int]]) -> tuple[int, int]:
    """The arena's base and the top of the graph inputs, from (index, kind, address, bytes) of the
    placed tensors (`placed_tensors`); kernels' temporaries are left out, some being elsewhere.

    The activations are counted from that top, which is right only where the inputs sit one after
    the other at the bottom: raises where an input is not at the base, an intermediate or output
    starts below the top (it would be left out of the count), or the inputs span more than their
    sizes each rounded up to `TENSOR_ALIGNMENT` (something else lies between them)."""
    arena = sorted((start, index, kind) for index, kind, start, _ in placed if kind != "temporary")
    base, lowest, lowest_kind = arena[0]
    inputs = sorted((start, size, index) for index, kind, start, size in placed if kind == "input")
    if not inputs:
        return base, base
    if inputs[0][0] != base:
        raise RuntimeError(
            f"the graph inputs are not at the bottom of the arena: tensor {lowest} ({lowest_kind}) starts "
            f"{inputs[0][0] - base:,} bytes below input tensor {inputs[0][2]}"
        )
    top = max(start + size for start, size, _ in inputs)
    names = ", ".join(str(index) for *_, index in inputs)
    below = [(start, index, kind) for start, index, kind in arena if kind != "input" and start < top]
    if below:
        start, index, kind = below[0]
        raise RuntimeError(
            f"tensor {index} ({kind}) starts at byte {start - base:,} of the arena, below the top of the graph "
            f"inputs (tensors {names}) at byte {top - base:,}: the activations would be undercounted"
        )
    room = sum(-(-size // TENSOR_ALIGNMENT) * TENSOR_ALIGNMENT for _, size, _ in inputs)
    if top - base > room:
        raise RuntimeError(
            f"the graph inputs (tensors {names}) span {top - base:,} bytes, more than their sizes rounded up to "
            f"TFLite's {TENSOR_ALIGNMENT}-byte alignment ({room:,}): something lies between them"
        )
    return base, top


def arena_figures(content: bytes, resolver: str) -> dict:
    """Step 3: the spans of TFLite's plan, read from its tensors' addresses."""
    graph, placed = placed_tensors(content, resolver)
    check_no_overlap(graph, placed)
    # Kernels' temporaries (im2col, ...) stay out of the spans: some sit in the persistent arena
    # (BatchMatMul's transposed constants), a separate allocation Python cannot tell apart.
    spans = {kind: [(start, size) for _, k, start, size in placed if k == kind] for kind in KINDS}
    everything = spans["input"] + spans["output"] + spans["intermediate"]
    base, inputs_top = input_bounds(placed)
    figures = {
        "bytes": max(start + size for start, size in spans["intermediate"]) - inputs_top,
        "arena": max(start + size for start, size in everything) - base,
    }
    if figures["arena"] > sum(size for *_, size in placed):
        raise RuntimeError(f"a span of {figures['arena']:,} bytes exceeds the sum of its tensors' sizes: not one arena")
    return figures | {"inputs": inputs_top - base, "temporaries": len(spans["temporary"]), "ops": len(graph.operators)}


def measure(path: Path) -> dict:
    """Steps 1 to 3 for one ONNX model."""
    with tempfile.TemporaryDirectory(prefix="memplan-tflite-") as tmp:
        content = to_tflite(path, Path(tmp)).read_bytes()
    figures = {}
    for resolver in RESOLVERS:
        try:
            figures[resolver] = arena_figures(content, resolver)
        except RuntimeError as error:  # the child's last line is the parent's cell: name the model
            raise RuntimeError(f"{path.name}, {resolver} kernels: {error}") from error
    return figures["reference"] | {"optimized": figures["optimized"]}


def chain_check() -> dict:
    """The method on a model worked out by hand: x -> Relu -> a -> Sigmoid -> b -> Tanh -> c -> Neg -> y,
    every tensor 1 x 1024 float32 (4,096 bytes).

    TFLite keeps x at the bottom for the whole run; a and b are alive together (Sigmoid reads a,
    writes b), then c takes a's freed buffer and y b's: activations 2 x 4,096 = 8,192 (a, b, c in
    two buffers, not three), arena 3 x 4,096 = 12,288. A kernel writing over its input would
    show 4,096 and 8,192."""
    import onnx
    from onnx import TensorProto, helper

    names = ["x", "a", "b", "c", "y"]
    nodes = [
        helper.make_node(op, [names[k]], [names[k + 1]]) for k, op in enumerate(["Relu", "Sigmoid", "Tanh", "Neg"])
    ]
    shape = [1, CHAIN_ELEMENTS]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    # IR version 8, as the torch exports carry: onnxsim's checker refuses onnx's newest.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    with tempfile.TemporaryDirectory(prefix="memplan-tflite-chain-") as tmp:
        path = Path(tmp) / "chain.onnx"
        onnx.save(model, str(path))
        figures = measure(path)
    tensor = 4 * CHAIN_ELEMENTS
    expected = {"bytes": 2 * tensor, "arena": 3 * tensor, "inputs": tensor}
    figures["expected"] = expected
    figures["passed"] = all(
        plan[key] == value for plan in (figures, figures["optimized"]) for key, value in expected.items()
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, nargs="?", help="An ONNX file (or --check).")
    parser.add_argument("--check", action="store_true", help="Measure the hand-worked chain instead.")
    parser.add_argument(
        "--tflite-path", help="A folder TensorFlow and onnx2tf were installed into (pip install --target)."
    )
    args = parser.parse_args()
    if args.tflite_path:
        sys.path.append(args.tflite_path)  # after memplan's own packages: their numpy and onnx win
    if not args.check and args.model is None:
        parser.error("give an ONNX file or --check")
    print(json.dumps(chain_check() if args.check else measure(args.model)))


if __name__ == "__main__":
    main()
