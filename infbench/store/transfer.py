"""Moving runs in and out of a store: `infbench export` and `infbench import`.

An export is a directory with one file per table (`runs.parquet`, `chunks.parquet`, ... or
`.csv`), streamed by DuckDB's COPY, stored findings included, so a diagnosed run arrives
diagnosed, and the profiler traces linked to the run (`traces`, `trace_ranks` and the five
event tables), so `infbench trace analyze` and `diagnose mbu` work on the other side with
the same numbers, the link probes linked to it (`link_probes`, `collectives`), the hang
captures linked to it (`hang_captures` and their per-rank tables), and where its
Prometheus series were pulled from (`prometheus_pulls`; the samples are in `metric_samples`). Import inserts those rows by column name, so a file written by an older
schema (fewer columns, or no `findings` or trace files) still loads, and refuses a run id or
trace id (or link probe id) that the store already holds.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from infbench.store.db import StoreError
from infbench.store.gpu_samples import TABLE as GPU_TABLE
from infbench.store.hang_schema import HANG_TABLES
from infbench.store.links_schema import LINK_TABLES
from infbench.store.prometheus_schema import PROMETHEUS_TABLES
from infbench.store.schema import BULK_TABLES, DIAGNOSIS_TABLES
from infbench.store.trace_schema import TRACE_TABLES
from infbench.store.transaction import transaction
from infbench.store.watch_schema import WATCH_TABLES
from infbench.store.workers_schema import WORKERS_TABLE

# Everything keyed by run_id that travels with a run (stored findings, the GPU telemetry
# sampled or read for it, where its Prometheus series were pulled from, and its workers'
# shares, losses and clocks included).
TABLES = ("runs", *BULK_TABLES, *DIAGNOSIS_TABLES, GPU_TABLE, *PROMETHEUS_TABLES, WORKERS_TABLE)
# The traces linked to the run travel too: `traces` by run_id, the rest by trace_id.
# So do its link probes: `link_probes` by run_id, `collectives` by probe_id; and its hang
# captures: `hang_captures` by run_id, the per-rank tables by capture_id.
# The live watch's triggers travel by run_id, their /metrics pages by trigger_id.
ALL_TABLES = (*TABLES, *TRACE_TABLES, *LINK_TABLES, *HANG_TABLES, *WATCH_TABLES)
EXPORT_FORMATS = ("parquet", "csv")
# `infbench export RUN --format trace`: the run's requests as a trace `infbench run --workload
# trace` replays (and `loadgen.workloads.trace` reads): one JSON line per request.
TRACE_FORMAT = "trace"
TRACE_FILE = "trace.jsonl"


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _reader(path: Path) -> str:
    if path.suffix == ".parquet":
        return f"read_parquet({_lit(str(path))})"
    return f"read_csv({_lit(str(path))}, header = true, auto_detect = true)"


# Tables whose ids an import must not duplicate: (table, id column, what the message calls it).
# Their child tables are keyed by these ids, so refusing here keeps every child row's parent
# unambiguous.
_UNIQUE_IDS = (
    ("traces", "trace_id", "trace"),
    ("link_probes", "probe_id", "link probe"),
    ("hang_captures", "capture_id", "hang capture"),
    ("watch_triggers", "trigger_id", "watch trigger"),
)


def _find(directory: Path, table: str) -> Path | None:
    for ext in (".parquet", ".csv"):
        p = directory / f"{table}{ext}"
        if p.is_file():
            return p
    return None


def import_run(con: duckdb.DuckDBPyConnection, directory: str | Path) -> list[str]:
    """Insert every run found in `directory`; return their ids. One transaction: all or none.

    Ownership: the caller owns `con` (opened writable) and closes it.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise StoreError(f"{directory}: not a directory written by `infbench export`")
    runs_file = _find(directory, "runs")
    if runs_file is None:
        raise StoreError(f"{directory}: no runs.parquet or runs.csv (not an infbench export)")
    run_ids = [r[0] for r in con.execute(f"SELECT run_id FROM {_reader(runs_file)}").fetchall()]
    if not run_ids:
        raise StoreError(f"{runs_file}: holds no run")
    clash = con.execute(
        "SELECT run_id FROM runs WHERE list_contains(?, run_id)", [run_ids]).fetchall()
    if clash:
        raise StoreError(f"run {clash[0][0]!r}: already in this store")
    for table, key, what in _UNIQUE_IDS:
        path = _find(directory, table)
        if path is None:
            continue
        clash = con.execute(
            f"SELECT {key} FROM {table} WHERE {key} IN (SELECT {key} FROM {_reader(path)})"
        ).fetchall()
        if clash:
            raise StoreError(f"{what} {clash[0][0]!r}: already in this store")
    with transaction(con, f"{directory}: import failed"):
        for table in ALL_TABLES:
            path = _find(directory, table)
            if path is None:
                continue
            store_cols = [r[0] for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position", [table]).fetchall()]
            file_cols = {r[0] for r in con.execute(
                f"DESCRIBE SELECT * FROM {_reader(path)}").fetchall()}
            cols = [c for c in store_cols if c in file_cols]
            names = ", ".join(cols)
            # CSV types are guessed; casting to the store's column types makes them exact.
            types = dict(con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?",
                [table]).fetchall())
            select = ", ".join(f"CAST({c} AS {types[c]}) AS {c}" for c in cols)
            con.execute(f"INSERT INTO {table} ({names}) SELECT {select} FROM {_reader(path)}")
    return run_ids


def export_run(con: duckdb.DuckDBPyConnection, run_id: str, out_dir: Path, fmt: str) -> list[Path]:
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"format: {fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    opts = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT csv, HEADER true)"
    files = []
    linked = f"SELECT trace_id FROM traces WHERE run_id = {_lit(run_id)}"
    probes = f"SELECT probe_id FROM link_probes WHERE run_id = {_lit(run_id)}"
    for table in ALL_TABLES:
        path = out_dir / f"{table}.{fmt}"
        if table in ("runs", "traces", "link_probes", "hang_captures"):
            where, order = f"run_id = {_lit(run_id)}", ""
        elif table in TRACE_TABLES:
            # Event tables: (trace_id, rank, event_id) is each row's place in its file.
            where = f"trace_id IN ({linked})"
            order = " ORDER BY 1, 2" if table == "trace_ranks" else " ORDER BY 1, 2, 3"
        elif table in HANG_TABLES:
            captures = f"SELECT capture_id FROM hang_captures WHERE run_id = {_lit(run_id)}"
            where, order = f"capture_id IN ({captures})", " ORDER BY ALL"
        elif table == "watch_metrics":
            triggers = f"SELECT trigger_id FROM watch_triggers WHERE run_id = {_lit(run_id)}"
            where, order = f"trigger_id IN ({triggers})", " ORDER BY ALL"
        elif table == "collectives":
            where, order = f"probe_id IN ({probes})", " ORDER BY probe_id, phase, op, bytes, repeat"
        else:
            where, order = f"run_id = {_lit(run_id)}", " ORDER BY 1, 2"
        # COPY streams to the file without materialising the table in Python.
        con.execute(f"COPY (SELECT * FROM {table} WHERE {where}{order}) "
                    f"TO {_lit(str(path))} {opts}")
        files.append(path)
    return files


def export_trace(con: duckdb.DuckDBPyConnection, run_id: str, out_dir: Path) -> tuple[Path, int, int]:
    """Write the run's measured requests as `trace.jsonl` (`timestamp` s from the first, the
    schedule where the run has one, else the send; `input_tokens` as the server counted them,
    else the target; `output_tokens` asked for, else produced), in request order. Return the
    file, the requests written and those left out for want of a length (failed in another
    tool, which recorded none): a replay of such a run has fewer requests."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / TRACE_FILE
    rows = f"""SELECT request_idx, coalesce(intended_send_ns, send_ns) AS t,
                      coalesce(prompt_tokens, target_input_tokens) AS input_tokens,
                      coalesce(max_tokens, output_tokens) AS output_tokens
               FROM requests WHERE run_id = {_lit(run_id)} AND phase = 'measure'"""
    complete = "t IS NOT NULL AND input_tokens IS NOT NULL AND output_tokens IS NOT NULL"
    con.execute(f"COPY (SELECT (t - min(t) OVER ()) / 1e9 AS timestamp, input_tokens, output_tokens "
                f"FROM ({rows}) WHERE {complete} ORDER BY request_idx) "
                f"TO {_lit(str(path))} (FORMAT json)")
    counts = con.execute(f"SELECT count(*) FILTER (WHERE {complete}), count(*) FILTER (WHERE NOT ({complete})) "
                         f"FROM ({rows})").fetchone()
    assert counts is not None
    return path, int(counts[0]), int(counts[1])
