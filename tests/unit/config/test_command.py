"""`infbench config capture/list/show` as a user runs them, and the run's automatic capture."""

from __future__ import annotations

import json
from pathlib import Path

from infbench.config.run_link import capture_for_run, link_run_config
from infbench.store import create_run
from tests.support.cli import infbench
from tests.support.stores import new_store

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "config_logs"


def test_capture_list_show(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = infbench("config", "capture", str(FIX / "vllm_0.10.2_v1.log"), "--db", str(db), "--label", "old")
    assert r.returncode == 0, r.stderr
    assert "vllm 0.10.2 from vllm_log" in r.stdout and "label old" in r.stdout
    r = infbench("config", "capture", str(FIX / "sglang_2025-01.log"), "--db", str(db),
                 "--engine-version", "0.4.1", "--json")
    doc = json.loads(r.stdout)
    assert doc["engine"] == "sglang" and doc["version"] == "0.4.1"
    assert doc["settings"]["scheduling_policy"] == {"value": "lpm", "origin": "resolved",
                                                    "raw_key": "schedule_policy", "line": 1}
    r = infbench("config", "list", "--db", str(db))
    assert r.returncode == 0 and "old" in r.stdout and "sglang" in r.stdout
    r = infbench("config", "show", "old", "--db", str(db))
    assert r.returncode == 0 and "gpu_memory_utilization = 0.85  (set; gpu_memory_utilization, line 3)" in r.stdout


def test_damaged_capture_exits_2_with_one_line_and_stores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = infbench("config", "capture", str(FIX / "vllm_truncated.log"), "--db", str(db))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "line 10" in r.stderr
    con = new_store(db)
    assert con.execute("SELECT count(*) FROM configs").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM config_values").fetchone() == (0,)
    con.close()
    r = infbench("config", "show", "nope", "--db", str(db))
    assert r.returncode == 2 and "no such config" in r.stderr


def _run(con, run_id: str, config: dict) -> None:  # type: ignore[no-untyped-def]
    create_run(con, run_id=run_id, config=config, target_url="http://127.0.0.1:9", model="m",
               endpoint="completions", t0_monotonic_ns=0)


def test_run_link_reference_engine_and_vllm_metrics(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    con = new_store(db)
    _run(con, "r-ref", {"engine_config": {"max_num_seqs": {"value": 128, "default": False},
                                          "block_size": {"value": 16, "default": True},
                                          "api_key": {"value": "<redacted>", "default": False}}})
    _run(con, "r-vllm", {"token_model": {"max_model_len": 4096}})
    con.execute("INSERT INTO metric_samples (run_id, t_ns, source, name, labels, value) VALUES ('r-vllm', 5, 'http://x/metrics', "
                "'vllm:cache_config_info', 'block_size=\"16\",cache_dtype=\"fp8\",enable_prefix_caching=\"True\",gpu_memory_utilization=\"0.9\"', 1.0)")
    _run(con, "r-none", {})
    ref = capture_for_run(con, "r-ref")
    assert ref is not None and ref.engine == "reference"
    assert ref.settings["max_num_seqs"].origin == "set" and ref.settings["block_size"].origin == "default"
    assert ref.values()["api_key"] == "<masked>"
    v = capture_for_run(con, "r-vllm")
    assert v is not None and v.engine == "vllm"
    assert v.values() == {"block_size": 16, "kv_cache_dtype": "fp8", "enable_prefix_caching": True,
                          "gpu_memory_utilization": 0.9, "max_model_len": 4096, "served_model_name": "m"}
    assert capture_for_run(con, "r-none") is None
    con.close()
    cid = link_run_config(db, "r-ref")
    assert cid is not None and link_run_config(db, "r-none") is None
    con = new_store(db)
    assert con.execute("SELECT run_id, engine FROM configs").fetchall() == [("r-ref", "reference")]
