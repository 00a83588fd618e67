"""Nsight Systems SQLite exports (`nsys export --type sqlite`) into the store's trace tables.

Exports differ by version: tables are created only when the profile had such events (no
NVTX_EVENTS without NVTX ranges), columns come and go (greenContextId since 2024), the
export metadata table was renamed (EXPORT_META_DATA -> META_DATA_EXPORT), and ENUM_* tables
that name enum values exist only in newer schemas. So every table and column is looked up
before it is read; what is absent is read as NULL and said in the trace's notes, and enum
names fall back to the values documented for CUPTI when the file has no ENUM table.

Rows come out of SQLite through the C cursor (no Python code runs per row), go into DuckDB as
Arrow columns, and are named and joined there (StringIds, enums) in SQL.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from probes.traces.errors import TraceError

# CUPTI's enum values, used when the export has no ENUM_* table (schema 2.x).
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
             5: "Device Static", 6: "Managed Static", 7: "Unknown"}
# Named as Kineto names its cuda_sync events, so one classifier reads both sources.
SYNC_KINDS = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync",
              4: "Context Sync"}
# NVTX event types as ENUM_NSYS_EVENT_TYPE numbers them (2024 exports); read from that table
# when the export has it, these values otherwise.
NVTX_EVENT_TYPES = {"nvtxmark": 34, "nvtxpushpoprange": 59, "nvtxstartendrange": 60,
                    "nvtxdomaincreate": 75, "nvtxthread": 39}

_SQLITE_MAGIC = b"SQLite format 3\x00"


class _Db:
    def __init__(self, path: Path) -> None:
        with path.open("rb") as f:
            if f.read(16) != _SQLITE_MAGIC:
                raise TraceError("not an SQLite file")
        try:
            self.con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            rows = self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except sqlite3.DatabaseError as exc:
            raise TraceError(f"corrupt SQLite file ({exc})") from None
        self.tables = {r[0] for r in rows}
        self.missing: list[str] = []

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}

    def read(self, table: str, wanted: dict[str, str], required: tuple[str, ...] = ()) -> pa.Table:
        """Columns `wanted` (name -> Arrow type) of `table`, with its rowid as `event_id`;
        absent columns are NULL. An absent table reads as no rows."""
        names = ["event_id", *wanted]
        types = [pa.int64(), *(_ARROW[t] for t in wanted.values())]
        schema = pa.schema(list(zip(names, types, strict=True)))
        if table not in self.tables:
            self.missing.append(table)
            return schema.empty_table()
        have = self.columns(table)
        lost = [c for c in required if c not in have]
        if lost:
            raise TraceError(f"{table} has no column {lost[0]} (not an Nsight Systems export?)")
        for c in wanted:
            if c not in have:
                self.missing.append(f"{table}.{c}")
        select = ", ".join(["rowid", *(f'"{c}"' if c in have else "NULL" for c in wanted)])
        try:
            rows = self.con.execute(f'SELECT {select} FROM "{table}"').fetchall()
        except sqlite3.DatabaseError as exc:
            raise TraceError(f"corrupt SQLite file: reading {table} failed ({exc})") from None
        cols: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [[] for _ in names]
        try:
            return pa.table([pa.array(c, type=t) for c, t in zip(cols, types, strict=True)],
                            schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise TraceError(f"{table}: unexpected values ({exc})") from None

    def meta(self) -> dict[str, str]:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if table in self.tables:
                return {str(k): str(v) for k, v in
                        self.con.execute(f'SELECT name, value FROM "{table}"').fetchall()}
        return {}

    def enum(self, table: str, fallback: dict[int, str]) -> dict[int, str]:
        if table not in self.tables or "id" not in (cols := self.columns(table)):
            return fallback
        label = "label" if "label" in cols else "name"
        return {int(i): str(n) for i, n in self.con.execute(f'SELECT id, "{label}" FROM "{table}"')}

    def nvtx_types(self) -> dict[str, int]:
        """NVTX event type -> eventType number, from ENUM_NSYS_EVENT_TYPE when present (its
        name or label column, compared without case and underscores)."""
        codes = dict(NVTX_EVENT_TYPES)
        for row in self.dicts("ENUM_NSYS_EVENT_TYPE"):
            ident = row.get("id")
            for v in row.values():
                key = str(v).lower().replace("_", "").replace(" ", "")
                if isinstance(ident, int) and key in codes:
                    codes[key] = ident
        return codes

    def dicts(self, table: str) -> list[dict[str, Any]]:
        if table not in self.tables:
            return []
        cur = self.con.execute(f'SELECT * FROM "{table}"')
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


_ARROW = {"i": pa.int64(), "s": pa.string(), "f": pa.float64()}
_GPU = {"start": "i", "end": "i", "deviceId": "i", "streamId": "i", "correlationId": "i",
        "globalPid": "i"}


def _enum_table(mapping: dict[int, str]) -> pa.Table:
    return pa.table({"id": pa.array(list(mapping), pa.int64()),
                     "name": pa.array(list(mapping.values()), pa.string())})


def _pid(col: str) -> str:
    # globalPid / globalTid are serialised ids: PID in bits 24..47, TID in bits 0..23.
    return f"(({col} >> 24) & 16777215)"


_GPU_OPS = """
INSERT INTO trace_gpu_ops (trace_id, rank, event_id, name, kind, category, device, stream,
    start_ns, end_ns, correlation, external_id, bytes, copy_kind, grid, block, registers_per_thread)
SELECT $trace_id, r.rank, o.event_id, o.name, o.kind, o.category, o.deviceId, o.streamId,
       o.start, o."end", o.correlationId, NULL, o.bytes, o.copy_kind, o.grid, o.block, o.registers
FROM (
  SELECT k.event_id, coalesce(d.value, s.value) AS name, 'kernel' AS kind,
         'CUPTI_ACTIVITY_KIND_KERNEL' AS category, deviceId, streamId, start, "end",
         correlationId, NULL::BIGINT AS bytes, NULL AS copy_kind,
         format('[{}, {}, {}]', gridX, gridY, gridZ) AS grid,
         format('[{}, {}, {}]', blockX, blockY, blockZ) AS block,
         registersPerThread AS registers, globalPid
  FROM _ns_kernel k LEFT JOIN _ns_strings d ON d.id = k.demangledName
       LEFT JOIN _ns_strings s ON s.id = k.shortName
  UNION ALL
  SELECT m.event_id, format('Memcpy {} ({} -> {})', coalesce(o.name, 'Unknown'),
         coalesce(sk.name, 'Unknown'), coalesce(dk.name, 'Unknown')), 'memcpy',
         'CUPTI_ACTIVITY_KIND_MEMCPY', deviceId, streamId, start, "end", correlationId, bytes,
         o.name, NULL, NULL, NULL, globalPid
  FROM _ns_memcpy m LEFT JOIN _ns_memcpy_kinds o ON o.id = m.copyKind
       LEFT JOIN _ns_mem_kinds sk ON sk.id = m.srcKind LEFT JOIN _ns_mem_kinds dk ON dk.id = m.dstKind
  UNION ALL
  SELECT m.event_id, format('Memset ({})', coalesce(k.name, 'Device')), 'memset',
         'CUPTI_ACTIVITY_KIND_MEMSET', deviceId, streamId, start, "end", correlationId, bytes,
         NULL, NULL, NULL, NULL, globalPid
  FROM _ns_memset m LEFT JOIN _ns_mem_kinds k ON k.id = m.memKind
  UNION ALL
  SELECT y.event_id, coalesce(k.name, 'Unknown Sync'), 'sync',
         'CUPTI_ACTIVITY_KIND_SYNCHRONIZATION', deviceId, streamId, start, "end",
         correlationId, NULL, NULL, NULL, NULL, NULL, globalPid
  FROM _ns_sync y LEFT JOIN _ns_sync_kinds k ON k.id = y.syncType
) o JOIN _ns_ranks r ON r.pid = $pid_of_gpid
"""

_API = """
INSERT INTO trace_api_calls (trace_id, rank, event_id, name, kind, pid, tid, start_ns, end_ns,
    correlation, external_id, cbid, return_value)
SELECT $trace_id, r.rank, c.event_id, s.value,
       CASE WHEN s.value LIKE 'cu%' AND s.value NOT LIKE 'cuda%' THEN 'driver' ELSE 'runtime' END,
       $pid_of_gtid, (c.globalTid & 16777215), c.start, c."end", c.correlationId, NULL, NULL,
       c.returnValue
FROM _ns_runtime c LEFT JOIN _ns_strings s ON s.id = c.nameId
JOIN _ns_ranks r ON r.pid = $pid_of_gtid
"""

_NVTX = """
INSERT INTO trace_annotations (trace_id, rank, event_id, name, kind, pid, tid, stream, domain,
    start_ns, end_ns, external_id)
SELECT $trace_id, r.rank, n.event_id, coalesce(n.text, s.value),
       CASE WHEN n.eventType = $mark THEN 'nvtx_mark' ELSE 'nvtx_range' END,
       $pid_of_gtid, (n.globalTid & 16777215), NULL, d.text, n.start,
       CASE WHEN n.eventType = $mark THEN NULL ELSE n."end" END, NULL
FROM _ns_nvtx n LEFT JOIN _ns_strings s ON s.id = n.textId
LEFT JOIN (SELECT domainId, any_value(text) AS text FROM _ns_nvtx
           WHERE eventType = $domain_create GROUP BY ALL) d
       ON d.domainId = n.domainId AND n.domainId <> 0
JOIN _ns_ranks r ON r.pid = $pid_of_gtid
WHERE n.eventType IN ($mark, $ranges) AND n.start IS NOT NULL
"""

_COLLECTIVES = """
INSERT INTO trace_collectives (trace_id, rank, event_id, name, op, device, stream, start_ns, end_ns,
    correlation, algorithm, protocol, dtype, in_elements, out_elements, message_bytes, group_size,
    process_group)
SELECT trace_id, rank, event_id, name,
       lower(regexp_extract(name, '^nccl(?:Dev)?Kernel_([A-Za-z]+)', 1)), device, stream,
       start_ns, end_ns, correlation,
       nullif(regexp_extract(name, '_(RING|TREE|NVLS|NVLS_TREE|COLLNET_DIRECT|COLLNET_CHAIN|PAT)_', 1), ''),
       nullif(regexp_extract(name, '_(LL128|LL|SIMPLE)(?:_|\\(|$)', 1), ''),
       NULL, NULL, NULL, NULL, NULL, NULL
FROM trace_gpu_ops WHERE trace_id = $trace_id AND kind = 'kernel' AND name ILIKE 'nccl%'
"""


def _render(sql: str, **params: str) -> str:
    for k in sorted(params, key=len, reverse=True):  # $pid_of_gtid before $pid...
        sql = sql.replace(f"${k}", params[k])
    return sql


def load(con: duckdb.DuckDBPyConnection, trace_id: str, path: Path,
         rank: int | None = None) -> dict[str, Any]:
    """Import one export; return the trace's facts (ranks rows, counts, notes). `rank` names
    the rank of a one-process export that is one file of a rank directory."""
    db = _Db(path)
    try:
        return _load(con, db, trace_id, path, rank)
    finally:
        db.con.close()


def _load(con: duckdb.DuckDBPyConnection, db: _Db, trace_id: str, path: Path,
          rank: int | None) -> dict[str, Any]:
    meta = db.meta()
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in db.tables and "StringIds" not in db.tables:
        raise TraceError("no CUPTI or StringIds tables (not an Nsight Systems SQLite export)")
    staged = {
        "_ns_strings": db.read("StringIds", {"id": "i", "value": "s"}, ("id", "value")),
        "_ns_kernel": db.read("CUPTI_ACTIVITY_KIND_KERNEL", {
            **_GPU, "demangledName": "i", "shortName": "i", "gridX": "i", "gridY": "i",
            "gridZ": "i", "blockX": "i", "blockY": "i", "blockZ": "i",
            "registersPerThread": "i"}, ("start", "end")),
        "_ns_memcpy": db.read("CUPTI_ACTIVITY_KIND_MEMCPY", {
            **_GPU, "bytes": "i", "copyKind": "i", "srcKind": "i", "dstKind": "i"}, ("start", "end")),
        "_ns_memset": db.read("CUPTI_ACTIVITY_KIND_MEMSET", {**_GPU, "bytes": "i", "memKind": "i"},
                              ("start", "end")),
        "_ns_sync": db.read("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {**_GPU, "syncType": "i"},
                            ("start", "end")),
        "_ns_runtime": db.read("CUPTI_ACTIVITY_KIND_RUNTIME", {
            "start": "i", "end": "i", "globalTid": "i", "correlationId": "i", "nameId": "i",
            "returnValue": "i"}, ("start", "end")),
        "_ns_nvtx": db.read("NVTX_EVENTS", {
            "start": "i", "end": "i", "eventType": "i", "text": "s", "textId": "i",
            "globalTid": "i", "domainId": "i"}, ("start",)),
        "_ns_memcpy_kinds": _enum_table(db.enum("ENUM_CUDA_MEMCPY_OPER", MEMCPY_KINDS)),
        "_ns_mem_kinds": _enum_table(db.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)),
        "_ns_sync_kinds": _enum_table(db.enum("ENUM_CUPTI_SYNC_TYPE", SYNC_KINDS)),
    }
    for name, table in staged.items():
        con.register(name, table)
    try:
        nv = db.nvtx_types()
        ranks = _ranks(con, db, nv["nvtxthread"])
        if rank is not None:
            if len(ranks) > 1:
                raise TraceError(f"holds {len(ranks)} GPU processes; import a multi-process "
                                 "export on its own, not as one rank of a directory")
            ranks = [(p, rank) for p, _ in ranks]
        con.register("_ns_ranks", pa.table({"pid": pa.array([p for p, _ in ranks], pa.int64()),
                                             "rank": pa.array([r for _, r in ranks], pa.int32())}))
        params = {"trace_id": "'" + trace_id.replace("'", "''") + "'",
                  "pid_of_gpid": _pid("o.globalPid"), "pid_of_gtid": _pid("globalTid"),
                  "mark": str(nv["nvtxmark"]),
                  "ranges": f"{nv['nvtxpushpoprange']}, {nv['nvtxstartendrange']}",
                  "domain_create": str(nv["nvtxdomaincreate"])}
        for sql in (_GPU_OPS, _API, _NVTX, _COLLECTIVES):
            con.execute(_render(sql, **params))
        events = sum(t.num_rows for n, t in staged.items() if not n.endswith(("_kinds", "strings")))
    finally:
        for name in [*staged, "_ns_ranks"]:
            con.unregister(name)
    start = db.dicts("TARGET_INFO_SESSION_START_TIME")
    epoch = start[0].get("utcEpochNs") if start else None
    gpus = db.dicts("TARGET_INFO_GPU")
    span = dict(con.execute(
        "SELECT rank, [min(start_ns), max(end_ns)] FROM trace_gpu_ops WHERE trace_id = ? "
        "GROUP BY rank", [trace_id]).fetchall())
    rows = [{"rank": r, "path": str(path), "world_size": len(ranks),
             "epoch_offset_ns": epoch if isinstance(epoch, int) else None,
             "start_ns": (span.get(r) or [None, None])[0], "end_ns": (span.get(r) or [None, None])[1],
             "round_to_us": False, "devices": json.dumps(gpus, default=str) if gpus else None,
             "metadata": json.dumps({"export": meta, "pid": pid}, default=str)}
            for pid, r in ranks]
    notes = [f"absent in this export: {', '.join(sorted(set(db.missing)))}"] if db.missing else []
    if not ranks:
        notes.append("no GPU activity (no kernels, memcpy, memset or synchronisation rows)")
    return {"ranks": rows, "events": events, "notes": notes,
            "format_version": meta.get("EXPORT_SCHEMA_VERSION"),
            "producer": " ".join(filter(None, (meta.get("EXPORT_PRODUCT_NAME"),
                                               meta.get("EXPORT_PRODUCT_VERSION")))) or None}


def _ranks(con: duckdb.DuckDBPyConnection, db: _Db, thread_type: int) -> list[tuple[int, int]]:
    """(pid, rank) for each process with GPU activity: the rank an NVTX thread name gives it
    (MPI tools name threads "MPI Rank N"), else its place in pid order."""
    pids = [r[0] for r in con.execute(f"""
        SELECT DISTINCT {_pid('globalPid')} AS pid FROM (
          SELECT globalPid FROM _ns_kernel UNION ALL SELECT globalPid FROM _ns_memcpy
          UNION ALL SELECT globalPid FROM _ns_memset UNION ALL SELECT globalPid FROM _ns_sync)
        WHERE globalPid IS NOT NULL ORDER BY pid""").fetchall()]
    named = dict(con.execute(f"""
        SELECT {_pid('globalTid')}, min(TRY_CAST(regexp_extract(text, '(?i)rank\\s*(\\d+)', 1) AS INTEGER))
        FROM _ns_nvtx WHERE eventType = {int(thread_type)} AND regexp_matches(text, '(?i)rank\\s*\\d+')
        GROUP BY ALL""").fetchall())
    ranks = [(p, named.get(p)) for p in pids]
    if any(r is None for _, r in ranks) or len({r for _, r in ranks}) < len(ranks):
        return [(p, i) for i, p in enumerate(pids)]
    return [(p, int(r)) for p, r in ranks]  # type: ignore[arg-type]  # none is None: checked above
