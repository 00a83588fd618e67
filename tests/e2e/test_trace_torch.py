"""A real PyTorch profiler trace from this machine through the whole path: the reference
engine's torch executor (CPU) profiles steps 3-7 (`--profile-steps`), the run is recorded,
the trace imported and linked to it, analysed, and the MBU playbook reads both."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.e2e.engine_process import running_engine
from tests.support.cli import infbench

pytestmark = pytest.mark.e2e

# The torch executor's default model (reference_engine.model MODEL_PRESETS["tiny-llama"]) as a
# Hugging Face config, so infbench.specs can size its bytes.
TINY = {"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 352, "vocab_size": 258,
        "max_position_embeddings": 4096}


def test_torch_executor_trace_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    prof, db = tmp_path / "prof", str(tmp_path / "t.duckdb")
    with running_engine("--executor", "torch", "--device", "cpu", "--model", "tiny-llama",
                        "--profile-dir", str(prof), "--profile-steps", "3:5") as eng:
        r = infbench("run", "--url", eng.url, "--db", db, "--quiet", "--arrival", "closed",
                     "--concurrency", "4", "--num-requests", "8", "--input-tokens",
                     "uniform:40:80", "--output-tokens", "24", "--scrape-interval", "0.5",
                     timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    traces = sorted(prof.glob("*.pt.trace.json"))
    assert len(traces) == 1
    r = infbench("trace", "import", str(traces[0]), "--run", "last", "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    imported = json.loads(r.stdout)
    assert imported["counts"]["trace_cpu_ops"] > 100 and imported["counts"]["trace_gpu_ops"] == 0

    con = duckdb.connect(db, read_only=True)
    steps = [r[0] for r in con.execute(
        "SELECT name FROM trace_annotations WHERE name LIKE 'engine_step#%' ORDER BY start_ns").fetchall()]
    logged = {r[0] for r in con.execute("SELECT step_id FROM engine_steps").fetchall()}
    ops = {r[0] for r in con.execute("SELECT DISTINCT name FROM trace_cpu_ops").fetchall()}
    con.close()
    assert steps == [f"engine_step#{i}" for i in range(3, 8)]
    assert set(range(3, 8)) <= logged            # the trace's steps are the step log's
    assert {"aten::linear", "aten::mm"} & ops    # the tiny Llama's forward pass, recorded

    r = infbench("trace", "analyze", "last", "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    cpu = json.loads(r.stdout)["cpu_steps"]
    assert [s["step"] for s in cpu] == steps and all(0 < s["busy_share"] <= 1 for s in cpu)
    r = infbench("trace", "analyze", "last", "--db", db, "--only", "temporal")
    assert r.returncode == 2 and "CPU-only" in r.stderr

    cfg = tmp_path / "tiny-llama.json"
    cfg.write_text(json.dumps(TINY))
    r = infbench("diagnose", "mbu", "last", "--db", db, "--model", str(cfg), "--gpu", "L4", "--json")
    assert r.returncode == 0, r.stderr
    diag = json.loads(r.stdout)
    assert "decode_mbu" in [f["verdict"] for f in diag["findings"]]
    assert 0 < diag["context"]["mbu"] < 1
    assert any("CPU-only" in n for n in diag["notes"])
