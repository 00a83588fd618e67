"""The workload a diff ranks for, taken from a stored run when one is named."""

from __future__ import annotations

import dataclasses

import duckdb

from infbench.config.impact import Workload


def workload_from_run(con: duckdb.DuckDBPyConnection, run: str, base: Workload) -> Workload:
    """The run's concurrency (closed loop) or mean in-flight requests, and its mean lengths,
    over `base`; shared prefixes when its workload was the prefix or multi-turn kind."""
    rid = con.execute("SELECT run_id FROM runs WHERE run_id = ? OR run_id LIKE ? "
                      "ORDER BY created_at DESC LIMIT 1", [run, run + "%"]).fetchone()
    if run == "last":
        rid = con.execute("SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 1").fetchone()
    if rid is None:
        raise LookupError(f"run {run!r}: no such run in the store")
    row = con.execute(
        "SELECT avg(coalesce(prompt_tokens, target_input_tokens)), avg(output_tokens), "
        "sum((end_ns - send_ns)::DOUBLE) / nullif(max(end_ns) - min(send_ns), 0) "
        "FROM requests WHERE run_id = ? AND error_class IS NULL AND phase = 'measure'", [rid[0]]).fetchone()
    cfg = con.execute("SELECT json_extract(config, '$.arrivals.concurrency'), "
                      "json_extract_string(config, '$.workload.workload') FROM runs WHERE run_id = ?",
                      [rid[0]]).fetchone()
    changes: dict = {}
    if row and row[0]:
        changes["input_tokens"] = max(1, round(row[0]))
    if row and row[1]:
        changes["output_tokens"] = max(1, round(row[1]))
    conc = int(cfg[0]) if cfg and cfg[0] not in (None, "null") and int(cfg[0]) > 0 else None
    if conc is None and row and row[2]:
        conc = max(1, round(row[2]))  # open loop: the mean number of requests in flight
    if conc:
        changes["concurrency"] = conc
    if cfg and cfg[1] in ("prefix", "multiturn"):  # WORKLOADS names
        changes["shared_prefix"] = True
    return dataclasses.replace(base, **changes)
