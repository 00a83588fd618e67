"""PyTorch profiler (Kineto) traces into the store's trace tables, one rank file at a time.

The events array is read by DuckDB's JSON reader (parallel, streaming) into a staging table
of text columns, then sorted into the shared tables by one INSERT ... SELECT each: no Python
runs per event. Every value is read as text and converted with TRY_CAST, because Kineto
versions disagree on types (a stream is a number in one and a string in another; `Spans`
rows carry names where ids belong) and one odd value must not fail a whole file.

Timestamps: `ts`/`dur` are microseconds with up to three decimals (kineto's fmtTs writes
`ns / 1000 . ns % 1000`), so they are converted as decimals, exactly, to integer ns; as
doubles, epoch-microsecond traces (1.7e15 us) would lose nanoseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from probes.traces.categories import (
    ANNOTATION_CATEGORIES,
    CPU_OP_CATEGORIES,
    GPU_CATEGORIES,
    sql_list,
)
from probes.traces.errors import TraceError
from probes.traces.kineto_file import extract

# Kineto arg keys read from each event (all as text; converted below).
_ARGS = ("External id", "correlation", "stream", "device", "bytes", "cbid", "grid", "block",
         "registers per thread", "Sequence number", "Collective name", "In msg nelems",
         "Out msg nelems", "Group size", "dtype", "Process Group Name")
_COLUMNS = ("{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', "
            "ts: 'VARCHAR', dur: 'VARCHAR', args: 'STRUCT("
            + ", ".join(f'"{a}" VARCHAR' for a in _ARGS) + ")'}")



def _int(expr: str) -> str:
    # Numbers may be written as 7, 7.0 or "7": through DOUBLE, like Python's int(float(x)).
    return f"TRY_CAST(TRY_CAST({expr} AS DOUBLE) AS BIGINT)"


def _ns(expr: str) -> str:
    return f"TRY_CAST(round(TRY_CAST({expr} AS DECIMAL(38, 3)) * 1000) AS BIGINT)"


def _kind_case(mapping: dict[str, str], col: str = "cat") -> str:
    whens = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in mapping.items())
    return f"CASE {col} {whens} END"


_STAGE = f"""
CREATE OR REPLACE TEMP TABLE _kineto AS
SELECT row_number() OVER () - 1 AS event_id, ph, cat, name,
       {_int('pid')} AS pid, {_int('tid')} AS tid,
       {_ns('ts')} AS start_ns, {_ns('dur')} AS dur_ns,
       {_int('args."External id"')} AS external_id, {_int('args.correlation')} AS correlation,
       {_int('args.stream')} AS stream, {_int('args.device')} AS device,
       {_int('args.bytes')} AS bytes, {_int('args.cbid')} AS cbid,
       args.grid AS grid, args.block AS block,
       {_int('args."registers per thread"')} AS registers,
       {_int('args."Sequence number"')} AS sequence_number,
       args."Collective name" AS collective, {_int('args."In msg nelems"')} AS in_elements,
       {_int('args."Out msg nelems"')} AS out_elements, {_int('args."Group size"')} AS group_size,
       args.dtype AS dtype, args."Process Group Name" AS process_group
FROM read_json($path, format = 'array', columns = {_COLUMNS})
"""

# A complete event (`X`) with a duration and a category; `Trace` is the profiler's own span.
_COMPLETE = "ph = 'X' AND dur_ns IS NOT NULL AND start_ns IS NOT NULL AND cat IS NOT NULL"

_INSERTS = (
    f"""INSERT INTO trace_gpu_ops (trace_id, rank, event_id, name, kind, category, device, stream,
        start_ns, end_ns, correlation, external_id, bytes, copy_kind, grid, block,
        registers_per_thread)
    SELECT $trace_id, $rank, event_id, name,
           coalesce({_kind_case(GPU_CATEGORIES)}, 'other'), cat, device, stream,
           start_ns, start_ns + dur_ns, correlation, external_id, bytes,
           CASE WHEN cat IN ('gpu_memcpy', 'Memcpy')
                THEN regexp_extract(name, 'Memcpy ([A-Za-z]+to[A-Za-z]+)', 1) END,
           grid, block, registers
    FROM _kineto
    WHERE {_COMPLETE} AND stream IS NOT NULL AND stream <> -1
      AND cat NOT IN ('gpu_user_annotation', 'Trace')""",
    f"""INSERT INTO trace_api_calls (trace_id, rank, event_id, name, kind, pid, tid, start_ns,
        end_ns, correlation, external_id, cbid, return_value)
    SELECT $trace_id, $rank, event_id, name,
           CASE WHEN lower(cat) LIKE '%driver' THEN 'driver' ELSE 'runtime' END, pid, tid,
           start_ns, start_ns + dur_ns, correlation, external_id, cbid, NULL
    FROM _kineto
    WHERE {_COMPLETE} AND (lower(cat) LIKE '%runtime' OR lower(cat) LIKE '%driver')
      AND coalesce(stream, -1) = -1""",
    f"""INSERT INTO trace_cpu_ops (trace_id, rank, event_id, name, kind, pid, tid, start_ns,
        end_ns, external_id, sequence_number)
    SELECT $trace_id, $rank, event_id, name,
           CASE WHEN cat = 'python_function' THEN 'python_function' ELSE 'cpu_op' END, pid, tid,
           start_ns, start_ns + dur_ns, external_id, sequence_number
    FROM _kineto
    WHERE {_COMPLETE} AND cat IN ({sql_list(CPU_OP_CATEGORIES)})""",
    f"""INSERT INTO trace_annotations (trace_id, rank, event_id, name, kind, pid, tid, stream,
        domain, start_ns, end_ns, external_id)
    SELECT $trace_id, $rank, event_id, name,
           CASE WHEN ph = 'X' THEN cat ELSE 'mark' END, pid, tid, stream, NULL,
           start_ns, CASE WHEN ph = 'X' THEN start_ns + dur_ns END, external_id
    FROM _kineto
    WHERE start_ns IS NOT NULL AND (({_COMPLETE} AND cat IN ({sql_list(ANNOTATION_CATEGORIES)}))
       OR (ph IN ('i', 'I') AND cat = 'cpu_instant_event'))""",
)

# NCCL kernels; their sizes come from the kernel's own args (newer PyTorch) or from the
# record_param_comms op that shares its External id.
_COLLECTIVES = """
INSERT INTO trace_collectives (trace_id, rank, event_id, name, op, device, stream, start_ns,
    end_ns, correlation, algorithm, protocol, dtype, in_elements, out_elements, message_bytes,
    group_size, process_group)
WITH k AS (
  SELECT * FROM _kineto
  WHERE ph = 'X' AND cat IN ('kernel', 'Kernel') AND name ILIKE 'nccl%' AND dur_ns IS NOT NULL
), p AS (
  SELECT external_id, any_value(collective) AS collective, any_value(in_elements) AS in_elements,
         any_value(out_elements) AS out_elements, any_value(group_size) AS group_size,
         any_value(dtype) AS dtype, any_value(process_group) AS process_group
  FROM _kineto WHERE name = 'record_param_comms' AND external_id IS NOT NULL GROUP BY ALL
), j AS (
  SELECT k.event_id, k.name, k.device, k.stream, k.start_ns, k.start_ns + k.dur_ns AS end_ns,
         k.correlation, coalesce(k.collective, p.collective) AS collective,
         coalesce(k.dtype, p.dtype) AS dtype, coalesce(k.in_elements, p.in_elements) AS in_el,
         coalesce(k.out_elements, p.out_elements) AS out_el,
         coalesce(k.group_size, p.group_size) AS group_size,
         coalesce(k.process_group, p.process_group) AS process_group
  FROM k LEFT JOIN p USING (external_id)
)
SELECT $trace_id, $rank, event_id, name,
       coalesce(lower(collective), lower(regexp_extract(name, '^nccl(?:Dev)?Kernel_([A-Za-z]+)', 1))),
       device, stream, start_ns, end_ns, correlation,
       nullif(regexp_extract(name, '_(RING|TREE|NVLS|NVLS_TREE|COLLNET_DIRECT|COLLNET_CHAIN|PAT)_', 1), ''),
       nullif(regexp_extract(name, '_(LL128|LL|SIMPLE)(?:_|\\(|$)', 1), ''),
       dtype, in_el, out_el, in_el * $dtype_bytes, group_size, process_group
FROM j
"""

# Element sizes of the dtypes PyTorch writes in record_param_comms.
_DTYPE_BYTES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int": 4, "long": 8,
                "byte": 1, "char": 1, "short": 2, "bool": 1, "float8_e4m3fn": 1,
                "float8_e5m2": 1}


def _dtype_case() -> str:
    whens = " ".join(f"WHEN '{k}' THEN {v}" for k, v in _DTYPE_BYTES.items())
    return f"(CASE lower(dtype) {whens} END)"


def _render(sql: str, **params: Any) -> str:
    for k, v in params.items():
        sql = sql.replace(f"${k}", v)
    return sql


def stage(con: duckdb.DuckDBPyConnection, path: Path, tmpdir: Path, table: str) -> dict[str, Any]:
    """Read one rank file's events into the temp table `table`; return the file's metadata.
    Runs outside the import's transaction: a parse error there would abort it."""
    kf = extract(path, tmpdir)
    sql = _STAGE.replace("_kineto", table)
    try:
        con.execute(sql.replace("$path", _quote(str(kf.events_path))))
    except duckdb.Error as exc:
        # The quick guess at where the events end can stop at a later list of objects:
        # cut again at the earliest possible end before calling the file malformed.
        kf.events_path.unlink(missing_ok=True)
        kf = extract(path, tmpdir, thorough=True)
        try:
            con.execute(sql.replace("$path", _quote(str(kf.events_path))))
        except duckdb.Error:
            raise TraceError(f"malformed trace events ({str(exc).splitlines()[0]})") from None
    finally:
        kf.events_path.unlink(missing_ok=True)
    return kf.metadata


def insert(con: duckdb.DuckDBPyConnection, trace_id: str, rank_hint: int | None, path: Path,
           table: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Sort a staged rank file into the trace tables; return its trace_ranks row (as a dict)
    with the event count and format version."""
    dist = found if isinstance(found := meta.get("distributedInfo"), dict) else {}
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) else rank_hint
    rank = 0 if rank is None else rank
    params = {"trace_id": _quote(trace_id), "rank": str(int(rank)), "dtype_bytes": _dtype_case()}
    for sql in (*_INSERTS, _COLLECTIVES):
        con.execute(_render(sql, **params).replace("_kineto", table))
    # The file's span, sub-microsecond digits and what was not imported, per category in
    # one pass (one statement, not two: see importer._transact).
    groups = con.execute(
        f"""SELECT coalesce(cat, ph, '?'), count(*),
                   count(*) FILTER (NOT ({_COMPLETE} AND (coalesce(stream, -1) <> -1
                  OR cat IN ({sql_list(CPU_OP_CATEGORIES + ANNOTATION_CATEGORIES)})
                  OR lower(cat) LIKE '%runtime' OR lower(cat) LIKE '%driver'))
              AND NOT (ph IN ('i', 'I') AND cat = 'cpu_instant_event')),
                   min(start_ns) FILTER ({_COMPLETE}), max(start_ns + dur_ns) FILTER ({_COMPLETE}),
                   bool_or(start_ns % 1000 <> 0)
            FROM {table} GROUP BY ALL ORDER BY 1""").fetchall()
    events = sum(g[1] for g in groups)
    starts = [g[3] for g in groups if g[3] is not None]
    ends = [g[4] for g in groups if g[4] is not None]
    start, end = (min(starts) if starts else None), (max(ends) if ends else None)
    fractional = any(g[5] for g in groups)
    skipped = {g[0]: g[2] for g in groups if g[2]}
    base = meta.get("baseTimeNanoseconds")
    rest = {k: v for k, v in meta.items() if k not in ("deviceProperties", "traceEvents")}
    rest["events_not_imported"] = skipped
    return {
        "rank": int(rank),
        "path": str(path),
        "world_size": dist.get("world_size") if isinstance(dist.get("world_size"), int) else None,
        "epoch_offset_ns": base if isinstance(base, int) else None,
        "start_ns": start, "end_ns": end,
        # HTA rounds every event inward to whole microseconds when the file's timestamps
        # have sub-microsecond digits; the analysis does the same so its numbers match.
        "round_to_us": bool(fractional),
        "devices": json.dumps(meta.get("deviceProperties")) if meta.get("deviceProperties") else None,
        "metadata": json.dumps(rest, default=str),
        "events": int(events),
        "format_version": str(meta.get("schemaVersion")) if "schemaVersion" in meta else None,
    }


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"
