"""Link probes in the store: one `link_probes` row and its `collectives` rows, in one
transaction (a failed write leaves nothing), and read back for the CLI's tables.

The verdict stored with a probe carries the SQL that recomputes its comparisons from the
stored rows, so anyone holding the file can check it without infbench.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa

from infbench.store import get_run
from infbench.store.links_schema import COLLECTIVE_COLUMNS

_ARROW = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(),
          "BOOLEAN": pa.bool_()}
_SCHEMA = pa.schema([(n, _ARROW[t.split()[0]]) for n, t in COLLECTIVE_COLUMNS])


@dataclass(frozen=True)
class StoredProbe:
    probe_id: str
    run_id: str | None
    source: str
    rows: int


def new_probe_id() -> str:
    return "lp-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def verdict_sql(probe_id: str) -> dict[str, str]:
    """SQL over the stored rows behind each verdict (the probe id inlined: runnable as is)."""
    pid = probe_id.replace("'", "''")
    return {
        "bisect": (
            "WITH t AS (SELECT step, repeat, group_ranks, time_us FROM collectives "
            f"WHERE probe_id = '{pid}' AND phase = 'bisect') "
            "SELECT a.step, a.group_ranks AS group_a, b.group_ranks AS group_b, "
            "median(a.time_us / b.time_us) AS median_ratio, count(*) AS repeats "
            "FROM t a JOIN t b ON a.step = b.step AND a.repeat = b.repeat AND a.group_ranks < b.group_ranks "
            "GROUP BY ALL ORDER BY a.step"),
        "pairwise": (
            "SELECT src_rank, dst_rank, median(time_us) AS median_us, median(busbw_gbps) AS median_busbw_gbps, "
            f"count(*) AS repeats FROM collectives WHERE probe_id = '{pid}' AND phase = 'pairwise' "
            "GROUP BY ALL ORDER BY median_us DESC"),
        "sweep": (
            "SELECT op, bytes, median(time_us) AS time_us, median(algbw_gbps) AS algbw_gbps, "
            f"median(busbw_gbps) AS busbw_gbps, max(wrong) AS wrong FROM collectives WHERE probe_id = '{pid}' "
            "AND phase IN ('sweep', 'import') GROUP BY ALL ORDER BY op, bytes"),
    }


def save_probe(con: duckdb.DuckDBPyConnection, *, source: str, rows: list[dict[str, Any]], config: dict[str, Any],
               backend: str | None, world_size: int | None, verdict: dict[str, Any] | None = None,
               notes: list[str] | None = None, path: str | None = None, run: str | None = None,
               hostname: str | None = None, probe_id: str | None = None) -> StoredProbe:
    """Write one probe and its rows in one transaction; `run` links it (id, prefix, 'last')."""
    run_id = get_run(con, run).run_id if run else None
    pid = probe_id or new_probe_id()
    if verdict is not None:
        verdict = {**verdict, "sql": verdict_sql(pid)}
    table = pa.Table.from_pylist([{**{n: None for n, _ in COLLECTIVE_COLUMNS}, **r, "probe_id": pid}
                                  for r in rows], schema=_SCHEMA)
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("INSERT INTO link_probes (probe_id, run_id, created_at, source, path, backend, world_size, "
                    "hostname, config, verdict, notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [pid, run_id, datetime.now(UTC).replace(tzinfo=None), source, path, backend, world_size,
                     hostname, json.dumps(config),
                     json.dumps(verdict) if verdict is not None else None, json.dumps(notes or [])])
        con.register("_links_rows", table)
        con.execute(f"INSERT INTO collectives SELECT {', '.join(n for n, _ in COLLECTIVE_COLUMNS)} FROM _links_rows")
        con.unregister("_links_rows")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return StoredProbe(pid, run_id, source, len(rows))


def sweep_table(con: duckdb.DuckDBPyConnection, probe_id: str) -> list[tuple[Any, ...]]:
    """(op, bytes, ranks, in_place, time_us, algbw, busbw, wrong, repeats) per op and size:
    medians over the repeats (an import has one row per line and half)."""
    return con.execute(
        "SELECT op, bytes, any_value(ranks), in_place, median(time_us), median(algbw_gbps), median(busbw_gbps), "
        "max(wrong), count(*) FROM collectives WHERE probe_id = ? AND phase IN ('sweep', 'import') "
        "GROUP BY op, bytes, in_place ORDER BY op, in_place, bytes", [probe_id]).fetchall()


def pair_table(con: duckdb.DuckDBPyConnection, probe_id: str) -> list[tuple[Any, ...]]:
    return con.execute(
        "SELECT src_rank, dst_rank, median(time_us), median(busbw_gbps), count(*) FROM collectives "
        "WHERE probe_id = ? AND phase = 'pairwise' GROUP BY ALL ORDER BY src_rank, dst_rank",
        [probe_id]).fetchall()


def get_probe(con: duckdb.DuckDBPyConnection, ref: str) -> dict[str, Any]:
    """A probe by id, unique id prefix, or `last`; KeyError with a one-line reason."""
    cols = ("probe_id", "run_id", "created_at", "source", "path", "backend", "world_size", "hostname", "config",
            "verdict", "notes")
    sel = f"SELECT {', '.join(cols)} FROM link_probes"
    if ref in ("last", "latest"):
        rows = con.execute(f"{sel} ORDER BY created_at DESC, probe_id DESC LIMIT 1").fetchall()
    else:
        rows = con.execute(f"{sel} WHERE starts_with(probe_id, ?) ORDER BY probe_id", [ref]).fetchall()
        rows = [r for r in rows if r[0] == ref] or rows
    if not rows:
        raise KeyError(f"link probe {ref!r}: no such probe in this store (see `infbench probe list-links`)")
    if len(rows) > 1:
        raise KeyError(f"link probe {ref!r}: ambiguous prefix, matches {len(rows)} probes")
    d = dict(zip(cols, rows[0], strict=True))
    for k in ("config", "verdict", "notes"):
        d[k] = json.loads(d[k]) if d[k] else None
    return d


def list_probes(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return con.execute(
        "SELECT p.probe_id, p.created_at, p.source, p.world_size, p.backend, p.run_id, count(c.probe_id) "
        "FROM link_probes p LEFT JOIN collectives c USING (probe_id) GROUP BY ALL "
        "ORDER BY p.created_at DESC").fetchall()
