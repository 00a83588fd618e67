"""`infbench config bisect` end to end on the reference engine: two default sets ("versions")
that differ in six or more knobs, captured from running engines; one test where one knob
costs throughput and latency, one where two knobs hurt only together. The bisection must
name exactly the culprit within the budget it printed before starting, store every probe
run linked to it, and never name a knob whose effect is within the gate's noise.

The simulated GPU is an L4 (decode steps of ~55 ms for an 8B model), so the engine, not this
shared two-core machine, sets the pace, as in the gate's own end-to-end tests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infbench.store import open_store
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.sim_executor import SimExecutor
from tests.e2e.engine_process import running_engine
from tests.support.cli import infbench

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ENGINE = ("--gpu", "L4", "--model", "meta-llama/Llama-3.1-8B", "--max-model-len", "512")
LOAD = ("--num-requests", "64", "--concurrency", "16", "--input-tokens", "uniform:32:96",
        "--output-tokens", "uniform:8:16")


def _defaults(path: Path, values: dict) -> Path:
    lines = ["[defaults]"] + [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _capture(db: Path, defaults: Path, label: str) -> None:
    # Start the engine in that "version" and capture what its /engine/config says.
    with running_engine("--defaults", str(defaults), *ENGINE) as e:
        r = infbench("config", "capture", e.url, "--db", str(db), "--label", label)
    assert r.returncode == 0, r.stderr


def _bisect(db: Path, good: Path, tmp: Path) -> tuple[dict, str]:
    launch = f"{{python}} -m reference_engine --port {{port}} --executor sim {' '.join(ENGINE)} --defaults {good} {{args}}"
    md = tmp / "path.md"
    r = infbench("config", "bisect", "--db", str(db), "--good", "good", "--bad", "bad",
                 "--launch", launch, *LOAD, "--json", "--markdown", str(md), timeout=1500)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    m = re.search(r"budget: at most (\d+) probes .*?, (\d+) runs", r.stderr)
    assert m, r.stderr
    assert (int(m.group(1)), int(m.group(2))) == (doc["budget_probes"], doc["budget_runs"])
    assert doc["runs_used"] <= doc["budget_runs"]
    assert md.read_text().startswith(f"## infbench config bisect {doc['bisection_id']}: found")
    return doc, r.stderr


def _check_store(db: Path, doc: dict) -> None:
    con = open_store(db)
    try:
        probes = con.execute("SELECT run_id, config_id, verdict FROM bisect_probes WHERE bisection_id = ? "
                             "ORDER BY probe_idx", [doc["bisection_id"]]).fetchall()
        assert len(probes) == doc["runs_used"]  # every run, baselines included, is a probe row
        runs = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
        assert all(p[0] in runs and p[1] is not None for p in probes)  # stored, config linked
        linked = con.execute("SELECT count(*) FROM configs WHERE run_id IN (SELECT run_id FROM "
                             "bisect_probes WHERE bisection_id = ?)", [doc["bisection_id"]]).fetchone()
        assert linked == (len(probes),)
        status, culprit = con.execute("SELECT status, culprit FROM bisections WHERE bisection_id = ?",
                                      [doc["bisection_id"]]).fetchone()
        assert status == "found" and json.loads(culprit) == doc["culprit"]
    finally:
        con.close()


def test_one_knob_that_halves_the_batch_is_named_alone(tmp_path: Path) -> None:
    good = _defaults(tmp_path / "good.toml", {
        "max_num_seqs": 16, "block_size": 16, "enable_prefix_caching": False, "stream_interval": 1,
        "scheduling_policy": "fcfs", "async_scheduling": False, "max_num_batched_tokens": 2048,
        "gpu_memory_utilization": 0.9})
    bad = _defaults(tmp_path / "bad.toml", {
        "max_num_seqs": 8, "block_size": 32, "enable_prefix_caching": True, "stream_interval": 2,
        "scheduling_policy": "priority", "async_scheduling": True, "max_num_batched_tokens": 4096,
        "gpu_memory_utilization": 0.85})
    db = tmp_path / "b.duckdb"
    _capture(db, good, "good")
    _capture(db, bad, "bad")
    doc, _ = _bisect(db, good, tmp_path)
    assert len(doc["keys"]) == 8
    assert doc["culprit"] == ["max_num_seqs"] and doc["culprit_values"] == {"max_num_seqs": 8}
    _check_store(db, doc)


def _pool_blocks(gmu: float, kv: str) -> int:
    cfg = EngineConfig(gpu="L4", model="meta-llama/Llama-3.1-8B", max_model_len=512, max_num_seqs=16,
                       max_num_batched_tokens=2048, gpu_memory_utilization=gmu, kv_cache_dtype=kv)
    try:
        return SimExecutor(cfg).num_blocks
    except ConfigError:
        return 0  # below the fraction where the pool holds one max_model_len sequence


def test_two_knobs_that_only_hurt_together_are_named_as_a_pair(tmp_path: Path) -> None:
    # fp8 KV at a generous memory fraction (good). The bad version stores KV in bf16 (twice the
    # bytes) AND lowers the memory fraction: either alone leaves room for the 16 sequences in
    # flight, both together hold about two thirds of them.
    lo, hi = 0.5, 0.9
    for _ in range(40):  # the fraction where the bf16 pool is 58 blocks of 16 tokens
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _pool_blocks(mid, "auto") < 58 else (lo, mid)
    low = round(hi, 4)
    assert _pool_blocks(low, "fp8") >= 112  # fp8 alone: the peak demand (16 x 7 blocks) fits
    common = {"max_num_seqs": 16, "max_num_batched_tokens": 2048, "block_size": 16}
    good = _defaults(tmp_path / "good.toml", {
        **common, "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.9, "stream_interval": 1,
        "scheduling_policy": "fcfs", "async_scheduling": False, "enable_prefix_caching": False})
    bad = _defaults(tmp_path / "bad.toml", {
        **common, "kv_cache_dtype": "auto", "gpu_memory_utilization": low, "stream_interval": 3,
        "scheduling_policy": "priority", "async_scheduling": True, "enable_prefix_caching": True})
    db = tmp_path / "b.duckdb"
    _capture(db, good, "good")
    _capture(db, bad, "bad")
    doc, log = _bisect(db, good, tmp_path)
    assert len(doc["keys"]) == 6
    assert sorted(doc["culprit"]) == ["gpu_memory_utilization", "kv_cache_dtype"], log
    # Each of the pair alone was measured and did not fail (that is what makes it a pair).
    alone = {tuple(s["keys"]): s["verdict"] for s in doc["steps"] if len(s["keys"]) == 1}
    assert all(v != "fail" for v in alone.values())
    _check_store(db, doc)
