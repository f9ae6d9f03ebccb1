"""A generator of broken and hostile ONNX files, and a driver that pushes them through the service.

Every case is built deterministically from a seed out of one small valid model (Conv,
Relu, Add, with a symbolic batch dim), by one of these mutations:

1. truncate the serialized bytes at a random point; flip random bits; random bytes;
2. input dims negative, zero, or 10^12; a symbolic dim bound to 10^12 at plan time;
3. a cycle between nodes; a node input no one produces; a graph output no one produces;
4. wrong element types (undefined, string, mismatched), an unknown op, an absurd opset;
5. a huge attribute tensor (a Constant claiming 10^12 elements, or holding 8 MiB);
6. If subgraphs nested 10 to 200 deep;
7. names with HTML, script and control characters (valid models: they should plan);
8. external data at ``..``, at an absolute path, or through a link; zip slip; zip bombs.

`exercise(client, cases)` uploads each case, plans it, and runs it, and records every
answer: the service must refuse with a 4xx that says why, or (for a model that is still
valid) plan and run it; a 5xx, a response without a reason, or a request slower than
`slow_s` is a failure. Run it on the full set with ``python -m reliability.malformed``.
"""

from __future__ import annotations

import argparse
import io
import random
import resource
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HOSTILE_NAMES = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "x\x00y",
    "\x1b[31mred\x1b[0m",
    "line\nbreak\ttab\r",
    "{{7*7}}",
    "../../etc/passwd",
    "\u202eevil",
    "a" * 5000,
]


@dataclass(frozen=True)
class Case:
    name: str  # unique, e.g. "truncate-0017"
    kind: str  # the mutation family
    data: bytes
    filename: str = "model.onnx"
    dims: dict[str, int] = field(default_factory=dict)


def base_model(names: dict[str, str] | None = None) -> onnx.ModelProto:
    """The valid model every case starts from; `names` renames its tensors and nodes."""
    n = {"x": "x", "w": "w", "b": "b", "c": "conv", "r": "relu", "y": "y", **(names or {})}
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), n["w"])
    b = numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), n["b"])
    nodes = [
        helper.make_node("Conv", [n["x"], n["w"]], [n["c"]], name=f"{n['c']}_node", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [n["c"]], [n["r"]], name=f"{n['r']}_node"),
        helper.make_node("Add", [n["r"], n["b"]], [n["y"]], name=f"{n['y']}_node"),
    ]
    graph = helper.make_graph(
        nodes,
        "base",
        [helper.make_tensor_value_info(n["x"], TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info(n["y"], TensorProto.FLOAT, ["batch", 4, 8, 8])],
        initializer=[w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString()


# ---- one function per mutation family: (rng, index) -> Case ---------------------------------


def truncated(rng: random.Random, i: int) -> Case:
    data = _bytes(base_model())
    return Case(f"truncate-{i:04d}", "truncate", data[: rng.randrange(0, len(data))])


def bit_flipped(rng: random.Random, i: int) -> Case:
    data = bytearray(_bytes(base_model()))
    for _ in range(rng.choice([1, 2, 8, 64])):
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
    return Case(f"bitflip-{i:04d}", "bitflip", bytes(data), dims={"batch": 1})


def garbage(rng: random.Random, i: int) -> Case:
    size = rng.choice([0, 1, 4, 100, 10_000])
    return Case(f"garbage-{i:04d}", "garbage", rng.randbytes(size))


def bad_dims(rng: random.Random, i: int) -> Case:
    model = base_model()
    dim = model.graph.input[0].type.tensor_type.shape.dim[rng.randrange(4)]
    choice = rng.choice(["negative", "zero", "huge", "bind-huge"])
    dims: dict[str, int] = {}
    if choice == "bind-huge":
        dims = {"batch": 10**12}
    else:
        dim.Clear()
        dim.dim_value = {"negative": -rng.randrange(1, 1000), "zero": 0, "huge": 10**12}[choice]
    return Case(f"dims-{choice}-{i:04d}", "dims", _bytes(model), dims=dims or {"batch": 1})


def broken_wiring(rng: random.Random, i: int) -> Case:
    model = base_model()
    nodes = model.graph.node
    choice = rng.choice(["cycle", "self-loop", "missing-producer", "missing-output"])
    if choice == "cycle":
        nodes[0].input[0] = nodes[2].output[0]  # conv reads y, which needs conv
    elif choice == "self-loop":
        nodes[1].input[0] = nodes[1].output[0]
    elif choice == "missing-producer":
        nodes[rng.randrange(3)].input[0] = f"nowhere_{i}"
    else:
        model.graph.output[0].name = f"never_made_{i}"
    return Case(f"wiring-{choice}-{i:04d}", "wiring", _bytes(model), dims={"batch": 1})


def wrong_types(rng: random.Random, i: int) -> Case:
    model = base_model()
    choice = rng.choice(["undefined", "string-input", "mismatch", "bogus-enum", "unknown-op", "opset"])
    if choice == "undefined":
        model.graph.input[0].type.tensor_type.elem_type = TensorProto.UNDEFINED
    elif choice == "string-input":
        model.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    elif choice == "mismatch":
        model.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.ones((1, 4, 1, 1), np.int64), "b"))
    elif choice == "bogus-enum":
        model.graph.input[0].type.tensor_type.elem_type = 77
    elif choice == "unknown-op":
        model.graph.node[1].op_type = rng.choice(["NoSuchOp", "<b>Relu</b>", "Relu\x00"])
    else:
        model.opset_import[0].version = rng.choice([0, 1, 999_999])
    return Case(f"types-{choice}-{i:04d}", "types", _bytes(model), dims={"batch": 1})


def huge_attribute(rng: random.Random, i: int) -> Case:
    model = base_model()
    if rng.random() < 0.5:
        value = TensorProto(name="k", data_type=TensorProto.FLOAT, dims=[10**6, 10**6], raw_data=b"\0" * 16)
    else:
        value = numpy_helper.from_array(np.zeros(2 << 20, np.float32), "k")  # 8 MiB inline
    const = helper.make_node("Constant", [], ["k"], name="huge_constant", value=value)
    model.graph.node.insert(0, const)
    model.graph.output.append(helper.make_tensor_value_info("k", TensorProto.FLOAT, list(value.dims)))
    return Case(f"attribute-{i:04d}", "attribute", _bytes(model), dims={"batch": 1})


def nested(rng: random.Random, i: int) -> Case:
    """If nodes nested `depth` deep, built in place from the top down (copying a deep
    message would make protobuf parse it, which it refuses past ~100 levels)."""
    depth = rng.choice([10, 30, 60, 200])
    model = base_model()
    graph = model.graph
    del graph.node[:]
    graph.input.add().CopyFrom(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    leaf = helper.make_graph([helper.make_node("Identity", ["b"], ["y"])], "leaf", [], [graph.output[0]])
    for level in range(depth):
        node = graph.node.add(op_type="If", name=f"if_{level}", input=["cond"], output=["y"])
        node.attribute.add(name="else_branch", type=onnx.AttributeProto.GRAPH).g.CopyFrom(leaf)
        then = node.attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH)
        graph = then.g
        graph.name = f"level_{level}"
        graph.output.add().CopyFrom(leaf.output[0])
    graph.node.add().CopyFrom(leaf.node[0])
    return Case(f"nested-{depth}-{i:04d}", "nested", _bytes(model), dims={"batch": 1})


def hostile_names(rng: random.Random, i: int) -> Case:
    picks = rng.sample(HOSTILE_NAMES, 6)
    names = dict(zip(["x", "w", "b", "c", "r", "y"], picks, strict=True))
    filename = f"{picks[0][:40]}.onnx"
    return Case(f"names-{i:04d}", "names", _bytes(base_model(names)), filename=filename, dims={"batch": 1})


def external_data(rng: random.Random, i: int) -> Case:
    """A .zip of a model whose weight lives in an external file at a hostile location."""
    model = base_model()
    weight = model.graph.initializer[0]
    raw = numpy_helper.to_array(weight).tobytes()
    choice = rng.choice(["dotdot", "absolute", "symlink", "zip-slip", "bomb", "many-entries"])
    location = {"dotdot": "../../weights.bin", "absolute": "/etc/passwd"}.get(choice, "weights.bin")
    weight.ClearField("float_data")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value=location)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(_member("model/model.onnx"), _bytes(model))
        if choice == "symlink":
            link = _member("model/weights.bin")
            link.external_attr = 0o120777 << 16  # a symbolic link to a file outside
            zf.writestr(link, "/etc/passwd")
        elif choice == "zip-slip":
            zf.writestr(_member("../weights.bin"), raw)
        elif choice == "bomb":
            zf.writestr(_member("model/weights.bin"), b"\0" * (64 << 20))
        elif choice == "many-entries":
            for k in range(1100):
                zf.writestr(_member(f"model/pad_{k}.bin"), b"")
        else:
            zf.writestr(_member("model/weights.bin"), raw)
    return Case(f"external-{choice}-{i:04d}", "external", buffer.getvalue(), filename="model.zip")


def _member(name: str) -> zipfile.ZipInfo:
    # A fixed date: the same seed gives the same bytes.
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


FAMILIES: list[Callable[[random.Random, int], Case]] = [
    truncated,
    bit_flipped,
    garbage,
    bad_dims,
    broken_wiring,
    wrong_types,
    huge_attribute,
    nested,
    hostile_names,
    external_data,
]


def generate(count: int, seed: int = 0) -> Iterator[Case]:
    """`count` cases, the families taking turns, each from its own seeded stream."""
    rng = random.Random(seed)
    for i in range(count):
        family = FAMILIES[i % len(FAMILIES)]
        yield family(random.Random(rng.getrandbits(64)), i)


# ---- the driver ----------------------------------------------------------------------------


@dataclass
class MalformedVerdict:
    """How the service answered one malformed case: where it stopped, with what status and why."""

    case: str
    kind: str
    stage: str  # where it ended: upload, plan, run, or "accepted" (planned and ran)
    status: int
    detail: str
    seconds: float  # the slowest single request or job wait of this case


@dataclass
class Report:
    outcomes: list[MalformedVerdict] = field(default_factory=list)
    rss_start_kib: int = 0
    rss_peak_kib: int = 0
    seconds: float = 0.0

    def failures(self, slow_s: float) -> list[MalformedVerdict]:
        """Server errors, refusals without a reason, and answers slower than `slow_s`."""
        return [
            o
            for o in self.outcomes
            if o.status >= 500 or (o.stage != "accepted" and not o.detail.strip()) or o.seconds > slow_s
        ]

    def by_stage(self) -> Counter[str]:
        return Counter(o.stage for o in self.outcomes)

    def by_status(self) -> Counter[int]:
        return Counter(o.status for o in self.outcomes)


def _detail(response: Any) -> str:
    try:
        return str(response.json().get("detail", ""))
    except Exception:  # not JSON: report the start of the body
        return response.text[:200]


def exercise_one(client: Any, case: Case, job_wait_s: float = 60.0) -> MalformedVerdict:
    """Upload, plan and run one case; the first refusal (or a server error) ends it."""
    slowest = 0.0

    def timed(call: Callable[[], Any]) -> Any:
        nonlocal slowest
        started = time.perf_counter()
        response = call()
        slowest = max(slowest, time.perf_counter() - started)
        return response

    def ended(stage: str, response: Any) -> MalformedVerdict:
        return MalformedVerdict(case.name, case.kind, stage, response.status_code, _detail(response), slowest)

    files = {"file": (case.filename, case.data, "application/octet-stream")}
    r = timed(lambda: client.post("/api/v1/models", files=files))
    if r.status_code != 201:
        return ended("upload", r)
    model_id = r.json()["id"]
    body = {"strategies": ["greedy_by_size"], "dims": case.dims}
    r = timed(lambda: client.post(f"/api/v1/models/{model_id}/plans", json=body))
    if r.status_code != 200:
        return ended("plan", r)
    plan = r.json()["plans"][0]
    if not plan["valid"]:
        return MalformedVerdict(case.name, case.kind, "plan", 422, plan.get("error") or "", slowest)
    run = {"plan_id": plan["id"], "dims": case.dims}
    r = timed(lambda: client.post(f"/api/v1/models/{model_id}/runs", json=run))
    if r.status_code != 202:
        return ended("run", r)
    job_url = r.json()["links"]["self"]
    started = time.perf_counter()
    while True:
        job = client.get(job_url).json()
        if job["state"] not in ("queued", "running"):
            break
        if time.perf_counter() - started > job_wait_s:
            client.post(f"{job_url}/cancel")
            return MalformedVerdict(
                case.name, case.kind, "run", 504, f"job still {job['state']} after {job_wait_s} s", 1e9
            )
        time.sleep(0.02)
    slowest = max(slowest, time.perf_counter() - started)
    if job["state"] == "done":
        return MalformedVerdict(case.name, case.kind, "accepted", 200, "", slowest)
    error = job.get("error") or {}
    return MalformedVerdict(
        case.name, case.kind, "run", int(error.get("status", 500)), str(error.get("detail", "")), slowest
    )


def exercise(client: Any, cases: list[Case] | Iterator[Case]) -> Report:
    """Push every case through the service behind `client` (TestClient or httpx.Client)."""
    report = Report(rss_start_kib=_rss_kib())
    started = time.perf_counter()
    for case in cases:
        report.outcomes.append(exercise_one(client, case))
        report.rss_peak_kib = max(report.rss_peak_kib, _rss_kib())
    report.seconds = time.perf_counter() - started
    return report


def _rss_kib() -> int:
    """Peak resident memory of this process so far (KiB, Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def markdown(report: Report, slow_s: float, seed: int) -> str:
    failures = report.failures(slow_s)
    stages = report.by_stage()
    statuses = ", ".join(f"{code}: {n}" for code, n in sorted(report.by_status().items()))
    kinds = Counter(o.kind for o in report.outcomes)
    lines = [
        f"Malformed models (`python -m reliability.malformed --count {len(report.outcomes)} --seed {seed}`):",
        "",
        f"- inputs tried: {len(report.outcomes)} ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})",
        f"- refused at upload {stages['upload']}, at planning {stages['plan']}, at run {stages['run']}; "
        f"planned and ran (still valid models) {stages['accepted']}",
        f"- status codes: {statuses}",
        f"- failures (5xx, refusal without a reason, or slower than {slow_s:g} s): {len(failures)}",
        f"- slowest case: {max((o.seconds for o in report.outcomes), default=0):.2f} s; "
        f"all cases took {report.seconds:.1f} s",
        f"- peak resident memory of the process: {report.rss_start_kib / 1024:.0f} MiB before, "
        f"{report.rss_peak_kib / 1024:.0f} MiB at most during the run",
    ]
    for o in failures[:10]:
        lines.append(f"  - FAILED {o.case} at {o.stage}: {o.status} {o.detail[:160]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import tempfile

    from fastapi.testclient import TestClient

    from app.jobs import local_cluster
    from app.main import Settings, create_app
    from app.services.docsections import replace_section

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slow", type=float, default=30.0, help="seconds a case may take at most")
    parser.add_argument("--docs", type=Path, default=None, help="write the figures into this markdown file")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as data,
        local_cluster() as scheduler,  # runs are jobs: Dask workers run them
        TestClient(
            create_app(Settings(data_dir=Path(data), scheduler=scheduler)), raise_server_exceptions=False
        ) as client,
    ):
        report = exercise(client, generate(args.count, args.seed))
    text = markdown(report, args.slow, args.seed)
    print(text)
    if args.docs:
        replace_section(args.docs, "reliability-malformed", text, title="memplan reliability")
    return 1 if report.failures(args.slow) else 0


if __name__ == "__main__":
    raise SystemExit(main())
