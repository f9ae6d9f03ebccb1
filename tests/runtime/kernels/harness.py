"""Run one kernel outside any session, against onnx's own oracles.

Used by the kernel tests: a node is run by its registered kernel into preallocated
outputs shaped like the oracle's, so kernels can be checked before a session exists.
"""

from __future__ import annotations

import functools
import re
import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from runtime.conditioning import tolerance
from runtime.kernels import TensorMeta, attributes_of, call, get_kernel


def run_kernel(model: onnx.ModelProto, inputs: list[np.ndarray | None], like: list[np.ndarray]) -> list[np.ndarray]:
    """Run the single node of `model` with its kernel; outputs shaped and typed like `like`."""
    node = model.graph.node[0]
    kernel = get_kernel(node.op_type)
    assert kernel is not None, f"no kernel for {node.op_type}"
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    # One slot per node output, None where the node omits it (an empty name), as kernels expect.
    named = [name for name in node.output if name]
    if len(named) == len(like):
        shapes = iter(like)
        outputs = []
        for name in node.output:
            e = next(shapes) if name else None
            outputs.append(None if e is None else np.empty(e.shape, dtype=e.dtype))
    else:
        outputs = [np.empty(e.shape, dtype=e.dtype) for e in like]
    attrs = attributes_of(node)
    ws = None
    if kernel.workspace is not None:
        metas_in = [None if x is None else TensorMeta(tuple(x.shape), x.dtype) for x in inputs]
        metas_out = [None if o is None else TensorMeta(tuple(o.shape), o.dtype) for o in outputs]
        ws = np.zeros(kernel.workspace(metas_in, metas_out, **attrs), dtype=np.uint8)
    # Inputs are read-only in the arena's contract: make that a hard error here.
    frozen = []
    for x in inputs:
        if x is not None:
            x = np.array(x)
            x.flags.writeable = False
        frozen.append(x)
    call(kernel, frozen, outputs, ws, attrs, opset)
    return [o for o in outputs if o is not None]


def run_against_reference(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(kernel outputs, onnx.reference outputs) for a one-node model."""
    expected = ReferenceEvaluator(model).run(None, feeds)
    node = model.graph.node[0]
    inputs = [feeds[name] if name else None for name in node.input]
    return run_kernel(model, inputs, expected), expected


def one_node(
    op: str,
    feeds: dict[str, np.ndarray | None],
    n_outputs: int = 1,
    opset: int = 21,
    out_types: list | None = None,
    **attrs,
) -> onnx.ModelProto:
    """A one-node model over `feeds` (None marks an omitted optional input); outputs typed
    like the first input unless `out_types` (numpy dtypes) says otherwise."""
    names = list(feeds)
    present = [n for n in names if feeds[n] is not None]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, [n if feeds[n] is not None else "" for n in names], outs, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(feeds[present[0]].dtype)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), feeds[n].shape)
            for n in present
        ],
        [
            helper.make_tensor_value_info(
                o, elem if out_types is None else helper.np_dtype_to_tensor_dtype(np.dtype(t)), None
            )
            for o, t in zip(outs, out_types or [None] * n_outputs, strict=True)
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray | None]) -> list[np.ndarray]:
    """onnxruntime's outputs on one thread (omitted inputs dropped)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {k: v for k, v in feeds.items() if v is not None})


def close(
    got: list[np.ndarray], expected: list[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5, what: str = ""
) -> None:
    """Same shapes, values within tolerance, output by output: rtol * |expected| + max(atol, rtol * rms
    of that output) (`runtime.conditioning.tolerance`), so that an element summed to near zero from
    large terms is judged on its output's scale, as another summation order would leave it."""
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        if g.dtype.kind != "f" or e.dtype.kind != "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
            continue
        bound = tolerance(e, rtol, atol)
        diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
        same = (np.isnan(g) & np.isnan(e)) | (np.isinf(g) & (g == e))
        bad = ~((diff <= bound) | same)
        assert not bad.any(), (
            f"{what + ': ' if what else ''}{int(bad.sum())} of {g.size} elements beyond rtol*|e| + max(atol, rtol*rms) = "
            f"rtol {rtol}, atol {atol}; worst |diff| {float(np.nanmax(np.where(bad, diff, 0))):.3g} "
            f"at {np.unravel_index(int(np.nanargmax(np.where(bad, diff, 0))), g.shape)}"
        )


def backend_cases(op_type: str) -> Iterator[tuple[str, onnx.ModelProto, list[np.ndarray | None], list[np.ndarray]]]:
    """onnx's own backend node tests of one op: (test name, model, inputs, expected outputs).

    The onnx wheel ships these as code (`onnx.backend.test.case.node`), not data. Only
    single-node tests with tensor inputs are yielded; inputs the node omits are None.
    """
    for case in _all_node_cases():
        graph = case.model.graph
        if len(graph.node) != 1 or graph.node[0].op_type != op_type:
            continue
        feeds, expected = case.data_sets[0]
        by_name = dict(zip((i.name for i in graph.input), feeds, strict=False))
        for init in graph.initializer:
            by_name[init.name] = numpy_helper.to_array(init)
        inputs = [by_name.get(name) if name else None for name in graph.node[0].input]
        yield case.name, case.model, inputs, [np.asarray(e) for e in expected]


@functools.cache
def _all_node_cases() -> list:
    # collect_testcases(op_type) filters only on its first call in a process, so collect
    # everything once (a few seconds) and filter here.
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(collect_testcases())


def random_window(rng: np.random.Generator, rank: int, allow_auto_pad: bool = True) -> dict:
    kernel = [int(k) for k in rng.integers(1, 4, rank)]
    attrs: dict = {
        "strides": [int(s) for s in rng.integers(1, 3, rank)],
        "dilations": [int(d) for d in rng.integers(1, 3, rank)],
    }
    auto_pad = rng.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]) if allow_auto_pad else "NOTSET"
    if auto_pad == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
    else:
        attrs["auto_pad"] = str(auto_pad)
    return kernel, attrs


def one_node_model(
    op_type: str, feeds: dict[str, np.ndarray | None], n_outputs: int = 1, opset: int = 18, **attrs
) -> onnx.ModelProto:
    """A model of one `op_type` node reading `feeds` in order (a None value omits that input)."""
    names = [n if x is not None else "" for n, x in feeds.items()]
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
        for n, x in feeds.items()
        if x is not None
    ]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None) for i in range(n_outputs)]
    node = helper.make_node(op_type, names, [o.name for o in outputs], **attrs)
    graph = helper.make_graph([node], op_type.lower(), inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def run_with_workspace(model: onnx.ModelProto, inputs: list, like: list, mode: str) -> tuple[list[np.ndarray], int]:
    """Run the node with no workspace ("none") or exactly the declared bytes of garbage ("exact")."""
    node = model.graph.node[0]
    k = get_kernel(node.op_type)
    attrs = attributes_of(node)
    shapes = iter(like)
    outputs = []  # one slot per node output, None for the omitted ones
    for name in node.output:
        e = next(shapes) if name else None
        outputs.append(None if e is None else np.full(e.shape, 7, dtype=e.dtype))
    size = 0
    ws = None
    if mode == "exact" and k.workspace is not None:
        metas_in = [None if x is None else TensorMeta(tuple(x.shape), x.dtype) for x in inputs]
        metas_out = [None if o is None else TensorMeta(tuple(o.shape), o.dtype) for o in outputs]
        size = k.workspace(metas_in, metas_out, **attrs)
        ws = np.full(size, 0xFF, dtype=np.uint8)  # NaN in float views: scratch must not be read before written
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    call(k, inputs, outputs, ws, attrs, opset)
    return [o for o in outputs if o is not None], size


# The activations ConvAct fuses: (ConvAct attributes, the ONNX nodes after the Conv).
CONV_ACTS = [
    ({}, []),
    ({"activation": "Relu"}, [("Relu", {})]),
    ({"activation": "Clip", "lo": 0.0, "hi": 6.0}, [("Clip", {})]),
    ({"activation": "HardSigmoid", "alpha": 0.3, "beta": 0.4}, [("HardSigmoid", {"alpha": 0.3, "beta": 0.4})]),
    ({"activation": "HardSwish"}, [("HardSwish", {})]),
    ({"activation": "Sigmoid"}, [("Sigmoid", {})]),
    ({"activation": "Silu"}, [("Sigmoid", {}), ("Mul", {})]),
]
CONV_ACT_IDS = ["none", "relu", "clip", "hardsigmoid", "hardswish", "sigmoid", "silu"]


def conv_reference(x, w, b, conv_attrs: dict, act_nodes: list, residual=None) -> np.ndarray:
    """onnx.reference's Conv (plus `residual` when given), then the activation's nodes (one
    of `CONV_ACTS`; Silu's Mul takes the Sigmoid's input)."""
    feeds = {"x": x, "w": w} | ({} if b is None else {"b": b}) | ({} if residual is None else {"r": residual})
    conv_inputs = [n for n in ("x", "w", "b") if n in feeds]
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], **conv_attrs)]
    last = "c"
    if residual is not None:
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        last = "s"
    inits = []
    for k, (op, attrs) in enumerate(act_nodes):
        inputs = [last]
        if op == "Clip":
            inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
            inputs += ["lo", "hi"]
        if op == "Mul":
            inputs = [nodes[-2].output[0], last]
        nodes.append(helper.make_node(op, inputs, [f"a{k}"], **attrs))
        last = f"a{k}"
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in feeds.items()],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, feeds)[0]


def conv_data(x_shape, w_shape, bias: bool, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Standard-normal float32 image, filters and (when `bias`) one bias per filter."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    return x, w, b


def call_conv(op: str, x, w, b, out, attrs: dict, ws: np.ndarray | None = None) -> np.ndarray:
    """The registered Conv (or memplan's `op`) prepared and called as a Session does, with
    exactly its declared workspace (NaN-filled unless `ws` is given); returns that workspace."""
    kernel = get_kernel(op, "memplan" if op != "Conv" else "")
    assert kernel is not None and kernel.workspace is not None
    inputs = [x, w] + ([] if b is None else [b])
    metas = [TensorMeta(a.shape, a.dtype) for a in inputs]
    out_metas = [TensorMeta(out.shape, out.dtype)]
    size = kernel.workspace(metas, out_metas, **attrs)
    if ws is None:
        ws = np.full(size // 4 + 1, np.nan, np.float32).view(np.uint8)[:size]
    if kernel.prepare is not None:
        kernel.prepare(metas, out_metas, **attrs)
    kernel.fn(*inputs, out=out, ws=ws[:size], **attrs)
    return ws


def refuses_a_short_workspace(graph, match: str) -> None:
    """A session given a plan of `graph` whose workspaces are each half what memplan plans fails to
    prepare, with an error matching `match` (the node and what its route declares), before any run."""
    import dataclasses

    import planner
    from runtime import MemoryOptions, Session, memory_problem
    from runtime.errors import ModelError

    problem = memory_problem(graph, MemoryOptions())
    short = tuple(dataclasses.replace(u, size=u.size // 2) if u.kind == "workspace" else u for u in problem.buffers)
    assert short != problem.buffers, "the node declares a workspace"
    small = dataclasses.replace(problem, buffers=short)
    session = Session(graph, plan=planner.plan(small, "first_fit"), problem=small)
    try:
        session.prepare()
    except ModelError as refused:
        assert re.search(match, str(refused)), str(refused)
    else:
        raise AssertionError("a plan short of the declared workspace was prepared")


def peak_bytes(call: Callable[[], object]) -> int:
    """Peak bytes allocated while `call()` runs (freed or not by its end), by tracemalloc."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
