"""`infbench gate` and `infbench sweep` on a real vLLM: two identical runs pass the default
gate, the server restarted with `--max-num-seqs 2` fails it, and a sweep finds its points."""

from __future__ import annotations

import json
from pathlib import Path

from tests.real_engine.conftest import infbench, ok
from tools.real_vllm.server import VllmServer

LOAD = ("--endpoint", "completions", "--arrival", "closed", "--concurrency", "4",
        "--num-requests", "240", "--input-tokens", "uniform:64:256", "--output-tokens",
        "uniform:16:48", "--seed", "3", "--quiet", "--json")


def _run(srv: VllmServer, db: Path) -> str:
    return json.loads(ok(infbench("run", "--url", srv.url, "--db", str(db), *LOAD)))["run_id"]


def _gate(db: Path, base: str, cand: str) -> tuple[int, dict]:
    r = infbench("gate", "--db", str(db), "--baseline", base, "--candidate", cand, "--json")
    return r.returncode, json.loads(r.stdout)


def test_gate_passes_identical_runs_and_fails_the_restart_with_fewer_sequences(
        vllm: VllmServer, vllm_changed: VllmServer, tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    _run(vllm, db)  # warm-up: the first run on a fresh server pays its compile and cache fill
    a1, a2 = _run(vllm, db), _run(vllm, db)
    rc, doc = _gate(db, a1, a2)
    assert rc == 0, json.dumps(doc)[:3000]
    _run(vllm_changed, db)
    slow = _run(vllm_changed, db)
    rc, doc = _gate(db, a2, slow)
    assert rc == 1, json.dumps(doc)[:3000]
    failed = [r for r in doc.get("rules", doc.get("results", [])) if r.get("verdict") == "fail"]
    assert failed, json.dumps(doc)[:3000]


def test_sweep_over_concurrency(vllm: VllmServer, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    out = ok(infbench("sweep", "--url", vllm.url, "--db", str(db), "--mode", "concurrency",
                      "--points", "1,2,4", "--duration", "6", "--input-tokens", "128",
                      "--output-tokens", "24", "--json", timeout=600))
    doc = json.loads(out)
    pts = doc.get("points", [])
    assert len(pts) == 3, json.dumps(doc)[:2000]
