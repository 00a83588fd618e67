"""A KV pool too small for the outputs: the pool fills, preemptions follow, outputs (not
prompts) filled it, and the recommended concurrency cap is checked by the short sweep
`--test-cap` runs against the same engine."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.e2e.engine_process import running_engine

pytestmark = pytest.mark.e2e

BLOCKS, BLOCK_SIZE = 136, 16
PROMPT, OUTPUT, CONCURRENCY = 80, 352, 11


def test_outputs_exhaust_the_pool_and_the_cap_is_tested_by_a_sweep(tmp_path: Path) -> None:
    db = tmp_path / "kv.duckdb"
    with running_engine("--num-gpu-blocks", str(BLOCKS), "--block-size", str(BLOCK_SIZE)) as engine:
        r = subprocess.run(
            [sys.executable, "-m", "infbench", "run", "--url", engine.url, "--db", str(db), "--quiet",
             "--arrival", "closed", "--concurrency", str(CONCURRENCY), "--duration", "6",
             "--input-tokens", str(PROMPT), "--output-tokens", str(OUTPUT),
             "--scrape-interval", "0.25", "--slo", "ttft=150ms"],
            capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        out = subprocess.run(
            [sys.executable, "-m", "infbench", "diagnose", "memory", "last", "--db", str(db),
             "--test-cap", "--cap-duration", "4", "--json"],
            capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads(out.stdout)
    con = duckdb.connect(str(db), read_only=True)
    try:
        first_run = con.execute("SELECT run_id FROM runs ORDER BY created_at LIMIT 1").fetchone()[0]
        assert d["run_id"] == first_run  # not the sweep's runs, which came later
        x = d["context"]["kv_exhaustion"]
        assert x["preemptions_after_fill"] > 0 and x["blocks_total"] == BLOCKS
        assert x["filled_by"] == "outputs"
        # The prompts in flight fit the pool; the outputs did not.
        assert CONCURRENCY * math.ceil(PROMPT / BLOCK_SIZE) < BLOCKS
        per_request = math.ceil((PROMPT + OUTPUT) / BLOCK_SIZE)
        assert x["cap"] == BLOCKS // per_request  # lengths are fixed: p90 = prompt + output
        assert x["observed_concurrency"] == CONCURRENCY
        finding = next(f for f in d["findings"] if f["verdict"] == "kv_cache_exhausted")
        ev = {e["name"]: e for e in finding["evidence"]}
        # The ledger's SQL reruns to the same fill step.
        assert con.execute(ev["pool_filled"]["sql"]).fetchone()[0] == ev["pool_filled"]["values"]["step_id"]
        test = d["context"]["cap_test"]
        points = {int(k): v for k, v in test["points"].items()}
        assert set(points) == {x["cap"], CONCURRENCY}
        swept = con.execute("SELECT value::INTEGER FROM sweep_points WHERE sweep_id = ? ORDER BY 1",
                            [test["sweep_id"]]).fetchall()
        assert [v for (v,) in swept] == sorted(points)
    finally:
        con.close()
    at_cap, above = points[x["cap"]], points[CONCURRENCY]
    # What the cap promises, measured: no preemption at the cap, less queueing than above it.
    assert at_cap["preemptions"] == 0 and above["preemptions"] > 0
    assert at_cap["mean_waiting"] < above["mean_waiting"]
    assert at_cap["ttft_p90_ms"] < above["ttft_p90_ms"]
    kept = at_cap["output_tok_per_s"] >= 0.9 * above["output_tok_per_s"]
    assert test["verdict"] == ("confirmed" if kept else "costs_goodput")
    assert any(str(x["cap"]) in a for a in finding["next_actions"])
