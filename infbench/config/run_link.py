"""Capture what a load-test target exposed about its configuration, and link it to the run.

Read from the store after the run, not from the target again: the reference engine's
`/engine/config` document is already in `runs.config.engine_config`, and a vLLM server's
`vllm:cache_config_info` gauge is in `metric_samples` (the run scraped `/metrics`), with
`max_model_len` from the run's token model. A target that exposes neither gets no row.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from infbench.config.endpoint import from_engine_config, from_info_labels
from infbench.config.model import Captured, CaptureError, Setting
from infbench.config.store import save_config
from infbench.store import open_store


def capture_for_run(con: duckdb.DuckDBPyConnection, run_id: str) -> Captured | None:
    row = con.execute("SELECT config, target_url, model FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return None
    config = json.loads(row[0] or "{}")
    url = row[1] or ""
    engine_doc = config.get("engine_config")
    if isinstance(engine_doc, dict) and engine_doc:
        try:
            return from_engine_config(engine_doc, url.rstrip("/") + "/engine/config")
        except CaptureError:
            return None
    cap = Captured("unknown", None, "live_endpoint", url)
    infos = con.execute(
        "SELECT name, labels FROM metric_samples WHERE run_id = ? AND name LIKE '%config_info' "
        "QUALIFY row_number() OVER (PARTITION BY name ORDER BY t_ns) = 1", [run_id]).fetchall()
    for name, labels in infos:
        from_info_labels(name, labels or "", cap)
        cap.engine = "vllm" if name.startswith("vllm:") else "sglang"
    if not cap.settings:
        return None  # only a model list: nothing a diff could use
    limit = (config.get("token_model") or {}).get("max_model_len")
    if isinstance(limit, int):
        cap.put(Setting("max_model_len", limit, "resolved", "max_model_len", None))
    if row[2]:
        cap.put(Setting("served_model_name", row[2], "resolved", "model", None), override=False)
    return cap


def link_run_config(db: str | Path, run_id: str) -> str | None:
    """Store the run's target configuration linked to the run; its config_id, or None when
    the target exposed none."""
    con = open_store(db)
    try:
        cap = capture_for_run(con, run_id)
        return None if cap is None else save_config(con, cap, run_id=run_id)
    finally:
        con.close()
