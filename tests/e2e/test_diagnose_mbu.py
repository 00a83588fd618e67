"""`infbench diagnose mbu` against the reference engine with known bandwidth derates and host
overhead: the MBU agrees with what the engine itself knows (its step log's own contexts and
durations), and the engine's synthetic trace of some decode steps names the dominant bucket.

Each case starts the sim engine (Llama-3.1-8B on an H100) with a fault or an overhead and a
profile of 40 decode steps, records a closed-loop run against it with `infbench run --url`,
reads the engine's `/engine/steps` (the truth), imports the trace linked to the run and
diagnoses. Cases differ in derate, overhead and load so that no threshold fits one case.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infbench.store import open_store
from playbooks.mbu import MbuOptions, diagnose_mbu
from playbooks.mbu.setup import MbuSetup, byte_model
from tests.e2e.engine_process import running_engine
from tests.support.cli import infbench

pytestmark = pytest.mark.e2e

MODEL, GPU = "meta-llama/Llama-3.1-8B", "H100-SXM"

# (engine flags, load, dominant bucket the engine's fault makes)
CASES = {
    "derate-2x": (("--fault", "slow-device:factor=2"),
                  ("--concurrency", "16", "--num-requests", "32", "--input-tokens",
                   "uniform:500:2000", "--output-tokens", "120"), "kernel_efficiency"),
    "derate-1.25x": (("--fault", "slow-device:factor=1.25", "--step-overhead-ms", "0.3"),
                     ("--concurrency", "8", "--num-requests", "16", "--input-tokens",
                      "uniform:1000:3000", "--output-tokens", "150"), "kernel_efficiency"),
    "host-overhead-8ms": (("--step-overhead-ms", "8"),
                          ("--concurrency", "12", "--num-requests", "24", "--input-tokens",
                           "uniform:300:1500", "--output-tokens", "120"), "host_launch_overhead"),
}


def engine_truth(steps: list[dict], setup: MbuSetup) -> float:
    """MBU from the engine's own record: its decode steps' durations and the contexts it
    decoded (decode_context_tokens), with the byte arithmetic of infbench.specs."""
    bm = byte_model(setup)
    dec = [s for s in steps if s["prefill_tokens"] == 0 and s["decode_seqs"] > 0]
    batch = np.array([s["decode_seqs"] for s in dec], dtype=float)
    ctx = np.array([s["decode_context_tokens"] for s in dec], dtype=float)
    dur = np.array([s["end"] - s["start"] for s in dec])
    total = bm.weights(batch).sum() + (ctx * bm.kv_bytes_per_token).sum()
    return float(total / dur.sum() / bm.peak_bandwidth)


@pytest.mark.parametrize("case", list(CASES))
def test_mbu_matches_the_engine_and_the_trace_names_the_bucket(tmp_path: Path, case: str) -> None:
    flags, load, dominant = CASES[case]
    prof = tmp_path / "prof"
    db = tmp_path / "m.duckdb"
    with running_engine("--model", MODEL, "--gpu", GPU, "--max-model-len", "8192",
                        "--profile-dir", str(prof), "--profile-steps", "40:40", *flags) as eng:
        r = infbench("run", "--url", eng.url, "--db", str(db), "--quiet", "--arrival", "closed",
                     "--scrape-interval", "0.5", *load, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        steps = eng.get_json("/engine/steps?after=0")["steps"]
    truth = engine_truth(steps, MbuSetup(model=MODEL, gpu=GPU))
    traces = sorted(prof.glob("*.pt.trace.json"))
    assert len(traces) == 1, traces
    r = infbench("trace", "import", str(traces[0]), "--run", "last", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counts"]["trace_gpu_ops"] > 40 * 100

    con = open_store(db)
    try:
        diag = diagnose_mbu(con, "last", MbuOptions())
        # the same diagnosis reached from the trace: its linked run gives model, GPU and bytes
        trace_id = json.loads(r.stdout)["trace_id"]
        by_trace = diagnose_mbu(con, trace_id, MbuOptions())
    finally:
        con.close()
    assert by_trace.run_id == diag.run_id and by_trace.context["buckets"] == diag.context["buckets"]
    mbu = diag.context["mbu"]
    assert abs(mbu - truth) <= 0.02, (mbu, truth)
    assert diag.data_sources["trace"] and diag.context["buckets_source"] == "trace"
    buckets = diag.context["buckets"]
    assert max(buckets, key=buckets.get) == dominant, buckets
    verdicts = diag.verdicts()
    assert f"mbu_lost_to_{dominant}" in verdicts and "decode_mbu" in verdicts
    rec = next(e.values for f in diag.findings for e in f.evidence if e.name == "context_reconstruction")
    assert rec["coverage_pct"] >= 95


def test_cli_names_the_dashboard_mistake_and_saves_findings(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    with running_engine("--model", MODEL, "--gpu", GPU, "--max-model-len", "8192") as eng:
        r = infbench("run", "--url", eng.url, "--db", str(db), "--quiet", "--arrival", "closed",
                     "--concurrency", "8", "--num-requests", "16", "--input-tokens",
                     "uniform:1500:3000", "--output-tokens", "100", "--scrape-interval", "0.5",
                     timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
    r = infbench("diagnose", "mbu", "last", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    correct = json.loads(r.stdout)["context"]["mbu"]
    # A dashboard that divides by 80% of the datasheet bandwidth shows correct / 0.8.
    r = infbench("diagnose", "mbu", "last", "--db", str(db), "--json", "--reported",
                 f"{correct / 0.8:.4f}")
    assert r.returncode == 0, r.stderr
    verdicts = [f["verdict"] for f in json.loads(r.stdout)["findings"]]
    assert "dashboard_achievable_bandwidth" in verdicts, verdicts
    # Without a trace the step log cannot split the missing share for this weight-bound run.
    assert "mbu_missing_unresolved" in verdicts or any(v.startswith("mbu_lost_to_") for v in verdicts)
    con = open_store(db, read_only=True)
    stored = con.execute("SELECT count(*) FROM findings WHERE playbook = 'mbu'").fetchall()[0][0]
    con.close()
    assert stored == len(verdicts)
    # the HTML report shows the stored findings with their evidence and SQL
    page = tmp_path / "report.html"
    r = infbench("report", "last", "--db", str(db), "--html", str(page))
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert "decode_mbu" in html and "dashboard_achievable_bandwidth" in html and "engine_steps" in html
    for args in (["--reported", "-1"], ["--reported", "250"], ["--gpu", "no-such-gpu"]):
        r = infbench("diagnose", "mbu", "last", "--db", str(db), *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
