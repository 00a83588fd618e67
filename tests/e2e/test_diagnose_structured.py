"""Structured output end to end: the bundled engine with injected compile costs and a mask
mode, `infbench run --workload structured --schemas K`, then `infbench diagnose structured`,
its figures checked against the engine's own step log in the same store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.engine_process import running_engine
from tests.support.store_rows import store_rows

pytestmark = pytest.mark.e2e


def infbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infbench", *args], capture_output=True,
                          text=True, timeout=120)


def run(url: str, db: Path, *workload: str, requests: int = 48, concurrency: int = 4) -> None:
    r = infbench("run", "--url", url, "--db", str(db), "--quiet", "--workload", "structured",
                 *workload, "--arrival", "closed", "--concurrency", str(concurrency), "--num-requests",
                 str(requests), "--input-tokens", "80", "--output-tokens", "40",
                 "--scrape-interval", "0.2")
    assert r.returncode == 0, r.stderr[-2000:]


def diagnose(db: Path) -> dict[str, Any]:
    r = infbench("diagnose", "structured", "last", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def evidence(d: dict[str, Any], verdict: str, name: str) -> dict[str, Any]:
    f = next(f for f in d["findings"] if f["verdict"] == verdict)
    return next(e["values"] for e in f["evidence"] if e["name"] == name)


def test_a_blocking_mask_and_compile_stalls_then_a_warm_rerun(tmp_path: Path) -> None:
    db = tmp_path / "so.duckdb"
    base_ms, per_kib, mask_us = 45.0, 70.0, 260.0
    with running_engine("--grammar-compile-base-ms", str(base_ms), "--grammar-compile-ms-per-kib",
                        str(per_kib), "--no-grammar-mask-overlap", "--grammar-mask-us-per-seq",
                        str(mask_us)) as engine:
        # the engine's answer is a document of the asked schema
        schema = {"type": "object", "properties": {"city": {"type": "string"},
                                                   "zip": {"type": "integer"}}}
        status, _, body = engine.post_json("/v1/chat/completions", {
            "model": "qwen2.5-3b-instruct", "max_tokens": 200, "temperature": 0,
            "messages": [{"role": "user", "content": "where?"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}})
        assert status == 200
        doc = json.loads(body["choices"][0]["message"]["content"])
        assert set(doc) == {"city", "zip"} and isinstance(doc["zip"], int)
        # stable schemas (--new-schemas 0): the first run compiles them, the second finds them
        wl = ("--schemas", "8", "--schema-fields", "uniform:6:60", "--new-schemas", "0")
        run(engine.url, db, *wl, requests=64, concurrency=3)
        cold = diagnose(db)
        run(engine.url, db, *wl, requests=64, concurrency=3)
        warm = diagnose(db)
        metrics = engine.metrics()
    # /metrics and the step log agree: the chat request's schema and the run's 8 compiled once
    logged = store_rows(db, "SELECT sum(grammar_compiles), sum(grammar_cache_hits) FROM engine_steps")[0]
    assert metrics["reference_engine_grammar_compiles_total"] == 1 + 8 == 1 + logged[0]
    assert metrics["reference_engine_grammar_cache_hits_total"] >= logged[1] > 0
    assert metrics["reference_engine_grammar_compile_seconds_count"] == 9
    verdicts = [f["verdict"] for f in cold["findings"]]
    assert verdicts == ["grammar_compile_stall", "grammar_mask_blocks_step"]
    compiles = evidence(cold, "grammar_compile_stall", "engine_compiles")
    assert compiles["compiles"] == 8 and compiles["cache_misses"] >= 8
    # the engine's own log: every compile took at least its priced cost
    listed = json.loads(store_rows(db, "SELECT json_extract(config, '$.workload.schemas.schemas') "
                                       "FROM runs ORDER BY created_at LIMIT 1")[0][0])
    priced = [base_ms + per_kib * s["bytes"] / 1024 for s in listed]
    assert compiles["ms_per_compile"] >= sum(priced) / len(priced) - 0.5
    first = evidence(cold, "grammar_compile_stall", "first_vs_later")
    assert first["schemas"] + first["schemas_in_opening_burst"] == 8
    assert first["schemas_stalled"] >= 4
    assert first["extra_ms_per_cold_schema_median"] >= min(priced) - 5
    mask = evidence(cold, "grammar_mask_blocks_step", "mask_per_step")
    assert mask["mode"] == "blocking"
    assert mask["exposed_ms_per_step"] == pytest.approx(mask["mask_ms_per_step"], rel=1e-3)
    assert mask["mask_ms_per_step"] == pytest.approx(mask["seqs_per_step"] * mask_us / 1e3, rel=0.01)
    # the second run's schemas were cached by the first: no stall, the mask still blocks
    assert [f["verdict"] for f in warm["findings"]] == ["grammar_mask_blocks_step"]
    hits = store_rows(db, "SELECT sum(grammar_cache_hits), sum(grammar_compiles) FROM engine_steps "
                          "WHERE run_id = (SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 1)")
    assert hits[0][1] == 0 and hits[0][0] > 0


def test_a_cache_smaller_than_the_schemas_and_an_overlapped_mask(tmp_path: Path) -> None:
    db = tmp_path / "so.duckdb"
    with running_engine("--grammar-compile-base-ms", "25", "--grammar-compile-ms-per-kib", "0",
                        "--grammar-cache-size", "2", "--grammar-mask-us-per-seq", "18") as engine:
        run(engine.url, db, "--schemas", "4", "--schema-fields", "9", requests=64)
        d = diagnose(db)
    verdicts = [f["verdict"] for f in d["findings"]]
    assert "grammar_cache_too_small" in verdicts and "grammar_mask_overlapped" in verdicts
    thrash = evidence(d, "grammar_cache_too_small", "compiles_vs_schemas")
    assert thrash["distinct_schemas"] == 4 and thrash["recompiles"] > 0
    engine_compiles = store_rows(db, "SELECT sum(grammar_compiles) FROM engine_steps")[0][0]
    assert thrash["compiles"] == engine_compiles
    mask = evidence(d, "grammar_mask_overlapped", "mask_per_step")
    assert mask["mode"] == "overlap" and mask["exposed_ms_per_step"] == 0.0
