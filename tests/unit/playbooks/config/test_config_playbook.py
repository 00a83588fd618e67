"""The config playbook (playbooks/config/) on small stores written from rows: each check
fires where its setting bound the run and stays quiet where another limit did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from infbench.store import create_run
from playbooks.config import diagnose_config
from tests.support.stores import insert_rows, new_store


def store(tmp_path: Path, values: dict[str, Any], *, workload: dict[str, Any] | None = None,
          steps: list[tuple[int, int]] = (), requests: list[tuple[int, int, str | None]] = (),
          concurrency: int = 8, linked: bool = True) -> duckdb.DuckDBPyConnection:
    """`steps`: (running, waiting) per engine step; `requests`: (prompt, max_tokens, error)."""
    con = new_store(tmp_path / "c.duckdb")
    create_run(con, run_id="r", config={"workload": workload or {"workload": "synthetic"},
                                        "arrivals": {"kind": "closed", "concurrency": concurrency}},
               target_url="http://127.0.0.1:1", model="m", endpoint="completions", t0_monotonic_ns=0)
    if linked:
        con.execute("INSERT INTO configs (config_id, created_at, engine, source_kind, run_id, digest) "
                    "VALUES ('c1', now(), 'vllm', 'live_endpoint', 'r', 'd')")
        insert_rows(con, "config_values", [
            {"config_id": "c1", "key": k, "value": json.dumps(v), "origin": "set"}
            for k, v in values.items()])
    insert_rows(con, "engine_steps", [
        {"run_id": "r", "step_id": i, "start_s": i * 0.01, "end_s": i * 0.01 + 0.009,
         "prefill_tokens": 0, "decode_seqs": running, "num_running": running, "num_waiting": waiting}
        for i, (running, waiting) in enumerate(steps)])
    insert_rows(con, "requests", [
        {"run_id": "r", "request_idx": i, "phase": "measure", "send_ns": i * 1000,
         "prompt_tokens": prompt, "max_tokens": max_tokens, "error_class": error}
        for i, (prompt, max_tokens, error) in enumerate(requests)])
    return con


@pytest.mark.parametrize(("cap", "full_share", "severity"), [(4, 0.6, "warning"), (16, 0.3, "warning"),
                                                             (2, 0.05, "info")])
def test_a_full_batch_with_requests_waiting_is_the_cap(tmp_path: Path, cap: int, full_share: float,
                                                        severity: str) -> None:
    n = 200
    full = int(n * full_share)
    steps = [(cap, 3)] * full + [(cap - 1, 0)] * (n - full)
    con = store(tmp_path, {"max_num_seqs": cap}, steps=steps, requests=[(100, 50, None)] * 10)
    d = diagnose_config(con, "r")
    (f,) = d.findings
    assert f.verdict == "batch_capped_by_max_num_seqs" and f.severity == severity
    q = next(e.values for e in f.evidence if e.name == "queue")
    assert q["samples_full_and_waiting"] == full and q["share_full_and_waiting"] == pytest.approx(full / n, abs=1e-3)
    assert all(e.sql for e in f.evidence)


def test_requests_waiting_behind_a_full_kv_pool_are_not_the_cap(tmp_path: Path) -> None:
    # 5 running of 64 allowed while others wait: the KV pool (or prefill budget) held them
    con = store(tmp_path, {"max_num_seqs": 64}, steps=[(5, 4)] * 300, requests=[(100, 50, None)] * 10)
    assert diagnose_config(con, "r").findings == []


@pytest.mark.parametrize(("limit", "reqs", "severity"), [
    (2048, [(1500, 600, "http_400"), (1000, 100, None), (1900, 200, "http_400")], "warning"),
    (4096, [(4000, 200, None), (100, 100, None)], "info"),
])
def test_requests_over_max_model_len(tmp_path: Path, limit: int, reqs: list, severity: str) -> None:
    con = store(tmp_path, {"max_model_len": limit}, requests=reqs)
    (f,) = diagnose_config(con, "r").findings
    assert f.verdict == "requests_over_max_model_len" and f.severity == severity
    over = sum(p + m > limit for p, m, _ in reqs)
    assert next(e.values for e in f.evidence if e.name == "requests")["over_limit"] == over


@pytest.mark.parametrize(("workload", "caching", "fires"), [
    ({"workload": "prefix", "prefix_groups": 4, "prefix_tokens": 512}, False, True),
    ({"workload": "multiturn", "turns": 3}, False, True),
    ({"workload": "synthetic"}, False, False),
    ({"workload": "prefix", "prefix_groups": 2, "prefix_tokens": 256}, True, False),
])
def test_prefix_caching_off_under_shared_prefixes(tmp_path: Path, workload: dict, caching: bool,
                                                  fires: bool) -> None:
    con = store(tmp_path, {"enable_prefix_caching": caching}, workload=workload,
                requests=[(300, 30, None)] * 5)
    verdicts = [f.verdict for f in diagnose_config(con, "r").findings]
    assert verdicts == (["prefix_caching_off"] if fires else [])


def test_a_prefill_budget_below_the_prompts_is_said_as_a_trade(tmp_path: Path) -> None:
    reqs = [(p, 20, None) for p in range(1000, 9000, 400)]
    con = store(tmp_path, {"max_num_batched_tokens": 2048, "enable_chunked_prefill": True}, requests=reqs)
    (f,) = diagnose_config(con, "r").findings
    assert f.verdict == "prefill_budget_below_prompts" and f.severity == "info"
    p = next(e.values for e in f.evidence if e.name == "prompts")
    assert p["steps_for_p90_prompt"] == -(-int(p["p90_prompt_tokens"]) // 2048)


def test_no_linked_configuration_is_one_line(tmp_path: Path) -> None:
    con = store(tmp_path, {}, linked=False)
    with pytest.raises(ValueError, match="no configuration is linked"):
        diagnose_config(con, "r")
