"""Schema version 18: requests carry tenant and adapter, engine steps the LoRA fields; a store
written before it keeps its rows (NULL in the new columns) and request_latency shows both."""

from __future__ import annotations

from pathlib import Path

from infbench.store import MIGRATIONS, BatchWriter, ColumnBuffer, create_run, open_store


def _run(con: object, run_id: str) -> None:
    create_run(con, run_id=run_id, config={}, target_url="http://127.0.0.1:1", model="m",  # type: ignore[arg-type]
               endpoint="completions", t0_monotonic_ns=0)


def test_version_17_store_migrates_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "v17.duckdb"
    old = open_store(path, migrations=MIGRATIONS[:17])
    _run(old, "old")
    old.execute("INSERT INTO requests (run_id, request_idx, label, phase, send_ns, first_content_ns, "
                "output_tokens) VALUES ('old', 0, 'x', 'measure', 0, 5000000, 3)")
    old.close()
    con = open_store(path)
    assert con.execute("SELECT max(version) FROM schema_version").fetchone() == (18,)
    assert con.execute("SELECT tenant, adapter, ttft_ms FROM request_latency WHERE run_id = 'old'"
                       ).fetchall() == [(None, None, 5.0)]
    step_cols = {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'engine_steps'").fetchall()}
    assert {"lora_adapters", "lora_waiting", "lora_ms", "max_loras"} <= step_cols


def test_writer_stores_tenant_adapter_and_lora_steps(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _run(con, "r")
    w = BatchWriter(con, "r")
    req = ColumnBuffer("requests")
    for i, (tenant, adapter) in enumerate([("docs", "sql"), ("chat", None), (None, None)]):
        req.append({"request_idx": i, "label": "x", "phase": "measure", "send_ns": 0,
                    "first_content_ns": (i + 1) * 1_000_000, "tenant": tenant, "adapter": adapter})
    steps = ColumnBuffer("engine_steps")
    steps.append({"step_id": 1, "lora_adapters": 1, "lora_waiting": 7, "lora_ms": 0.25, "max_loras": 1})
    w.put_buffer(req)
    w.put_buffer(steps)
    w.close()
    rows = con.execute("SELECT tenant, adapter, ttft_ms FROM request_latency WHERE run_id = 'r' "
                       "ORDER BY request_idx").fetchall()
    assert rows == [("docs", "sql", 1.0), ("chat", None, 2.0), (None, None, 3.0)]
    assert con.execute("SELECT lora_adapters, lora_waiting, lora_ms, max_loras FROM engine_steps"
                       ).fetchall() == [(1, 7, 0.25, 1)]
