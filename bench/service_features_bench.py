"""The service's memory-API and training endpoints, measured through the real app (TestClient on a
fresh SQLite data directory): copies of a model run with and without zero-copy, a pipeline of two
stored MLPs (joint against separate arenas, copies), parameter bytes shared between two stored models
cut from one network, a stored CNN's training step by category, and the training demo's loss and
seconds per step. Writes section "service-runtime-features" of docs/BENCHMARKS.md:
``python bench/service_features_bench.py``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app.jobs import local_cluster  # noqa: E402
from app.main import Settings, create_app  # noqa: E402
from app.services.docsections import replace_section  # noqa: E402
from runtime.training import models as training_models  # noqa: E402
from tests.memory_models import mlp, rnn_output, rnn_step  # noqa: E402

BATCH = 64


def upload(client: TestClient, model, name: str) -> str:
    return client.post("/api/v1/models", files={"file": (f"{name}.onnx", model.SerializeToString())}).json()["id"]


def finished(client: TestClient, job: dict) -> dict:
    assert client.app.state.jobs.wait(job["id"], 600)
    done = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert done["state"] == "done", done
    return done["result"]


def measure(client: TestClient) -> dict:
    first = upload(client, mlp(256, 1024, 512, seed=1), "first")
    second = upload(client, mlp(512, 1024, 128, seed=2), "second")
    runs = {}
    for zero_copy in (False, True):
        job = client.post(f"/api/v1/models/{first}/runs", json={"dims": {"N": BATCH}, "zero_copy": zero_copy}).json()
        runs[zero_copy] = finished(client, job)
    body = {
        "models": {"a": first, "b": second},
        "connections": {"a:y": "b:x"},
        "dims": {"a": {"N": BATCH}, "b": {"N": BATCH}},
    }
    pipes = {}
    for io, zero_copy in (("arena", False), ("external", True)):
        pipe = client.post("/api/v1/pipelines", json={**body, "io": io}).json()
        result = finished(client, client.post(pipe["links"]["runs"], json={"zero_copy": zero_copy}).json())
        pipes[(io, zero_copy)] = (pipe, result)
    vocab, hidden = 50_000, 64
    upload(client, rnn_step(vocab, hidden), "rnn_step")
    output = upload(client, rnn_output(vocab, hidden), "rnn_output")
    started = time.perf_counter()
    shared = client.get(f"/models/{output}", params={"format": "json"}).json()["parameters"]
    shared_seconds = time.perf_counter() - started
    cnn = upload(client, training_models.small_cnn(batch=32, size=8, channels=(8, 16), classes=10, seed=0), "cnn")
    plan = client.post(f"/api/v1/models/{cnn}/training-plans", json={"optimizer": "adam"}).json()
    demo = {}
    for model in ("mlp", "cnn"):
        started = time.perf_counter()
        result = finished(client, client.post("/api/v1/training/demo", json={"model": model, "steps": 200}).json())
        demo[model] = (result, time.perf_counter() - started)
    return {
        "runs": runs,
        "pipes": pipes,
        "shared": shared,
        "shared_seconds": shared_seconds,
        "plan": plan,
        "demo": demo,
    }


def verdict(result: dict) -> str:
    v = result["verdict"]
    return f"{'matches' if v['passed'] else 'DIFFERS from'} {v['oracle']}"


def markdown(m: dict) -> str:
    lines = [
        "## Service: zero-copy runs, pipelines, shared parameters, training",
        "",
        "`python bench/service_features_bench.py`: the real app through TestClient on a fresh data directory.",
        f"Models: MLPs 256-1024-512 and 512-1024-128 (tests/memory_models.py), batch {BATCH}.",
        "",
        "| request | copies | copied bytes | arena bytes | verdict |",
        "|---|---:|---:|---:|---|",
    ]
    for zero_copy, r in m["runs"].items():
        name = "POST /models/{id}/runs" + (' `"zero_copy": true`' if zero_copy else "")
        lines.append(f"| {name} | {r['copies']} | {r['copied_bytes']:,} | {r['arena_bytes']:,} | {verdict(r)} |")
    for (io, zero_copy), (_pipe, r) in m["pipes"].items():
        name = f"pipeline a->b, io={io}" + (", zero-copy" if zero_copy else "")
        lines.append(f"| {name} | {r['copies']} | {r['copied_bytes']:,} | {r['arena_bytes']:,} | {verdict(r)} |")
    lines.append("")
    for (io, _), (pipe, _) in m["pipes"].items():
        lines.append(
            f"Pipeline io={io}: joint arena {pipe['joint_arena_bytes']:,} bytes against {pipe['separate_total_bytes']:,} "
            f"for the two models planned alone ({pipe['ratio']:.3f}x)."
        )
    s = m["shared"]
    lines += [
        "",
        f"Model page of the output layer of a 50,000-word language model cut in two: {s['parameter_bytes']:,} parameter "
        f"bytes, {s['shared_with_others_bytes']:,} shared with the stored step model (the tied embedding), "
        f"found by content hash in {m['shared_seconds']:.2f} s (first view; later views are cached).",
        "",
        f"Training step of the small CNN (batch 32, Adam) by category: {m['plan']['per_category_total']:,} bytes in one "
        f"arena per category, {m['plan']['unified_bytes']:,} unified ({m['plan']['ratio']:.3f}x).",
        "",
        "| demo (200 steps, batch 32, Adam) | first loss | last loss | training accuracy | seconds (job) | data |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for model, (r, seconds) in m["demo"].items():
        lines.append(
            f"| {model} | {r['first_loss']:.4f} | {r['last_loss']:.4f} | {r['accuracy']:.3f} | {seconds:.2f} | {r['source']} |"
        )
    return "\n".join(lines)


def main() -> None:
    with (
        tempfile.TemporaryDirectory() as folder,
        local_cluster() as scheduler,
        TestClient(create_app(Settings(data_dir=Path(folder), scheduler=scheduler))) as client,
    ):
        text = markdown(measure(client))
    print(text)
    replace_section(ROOT / "docs" / "BENCHMARKS.md", "service-runtime-features", text)


if __name__ == "__main__":
    main()
