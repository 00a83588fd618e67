"""`diagnose memory` on what a real vLLM's /metrics gives: the server's resident memory as a
ledger over finished requests, its KV usage, no step log; a healthy run has no finding, and
the playbook says which data it lacked."""

from __future__ import annotations

import json
from pathlib import Path

from tests.real_engine.conftest import infbench, ok
from tools.real_vllm.server import VllmServer


def test_memory_on_vllms_own_metrics(vllm: VllmServer, tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    ok(infbench("run", "--url", vllm.url, "--db", str(db), "--quiet", "--scrape-interval", "0.5",
                "--arrival", "closed", "--concurrency", "4", "--num-requests", "60",
                "--input-tokens", "uniform:100:600", "--output-tokens", "uniform:8:48"))
    doc = json.loads(ok(infbench("diagnose", "memory", "last", "--db", str(db), "--json")))
    assert doc["data_sources"]["server_metrics"] and not doc["data_sources"]["engine_steps"]
    assert doc["findings"] == [], json.dumps(doc)[:3000]
    ledger = doc["context"]["ledger"]
    assert ledger["requests_finished"] == 60
    # vLLM exports its resident memory (process_resident_memory_bytes): a real figure, in a
    # real range for a server process with a tiny model
    rss = ledger["series"]["rss"]
    assert 100 * 2**20 < rss["last_bytes"] < 16 * 2**30, rss
