"""Write GPU telemetry rows into `gpu_samples` (schema: `infbench.store.gpu_schema`).

Samples are few (one row per GPU per second or so), so rows arrive as plain dicts and go in
with one Arrow batch per call; keys not given are NULL, unknown keys are an error (a typo
would otherwise silently drop a field).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import duckdb
import pyarrow as pa

from infbench.store.arrays import table as arrow_table
from infbench.store.gpu_schema import GPU_SAMPLE_COLUMNS

_ARROW = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(),
          "DOUBLE": pa.float64()}
TABLE = "gpu_samples"
COLUMNS: tuple[str, ...] = tuple(n for n, _ in GPU_SAMPLE_COLUMNS if n != "run_id")
SOURCES = ("nvml", "dcgm", "engine")


def _schema() -> pa.Schema:
    return pa.schema([(n, _ARROW[t]) for n, t in GPU_SAMPLE_COLUMNS if n != "run_id"])


def insert_gpu_samples(
    con: duckdb.DuckDBPyConnection, run_id: str, rows: Iterable[Mapping[str, Any]]
) -> int:
    """Insert rows (dicts keyed by column name, ``t_ns`` on the run's axis); returns the count."""
    rows = list(rows)
    if not rows:
        return 0
    for r in rows:
        unknown = set(r) - set(COLUMNS)
        if unknown:
            raise ValueError(f"gpu_samples: no such column(s) {', '.join(sorted(unknown))}")
        if r.get("source") not in SOURCES:
            raise ValueError(f"gpu_samples: source must be one of {', '.join(SOURCES)}, not {r.get('source')!r}")
        if r.get("t_ns") is None:
            raise ValueError("gpu_samples: every row needs t_ns")
    schema = _schema()
    batch = arrow_table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema)
    cur = con.cursor()
    try:
        cur.register("_infbench_gpu_batch", batch)
        cur.execute(
            f"INSERT INTO gpu_samples (run_id, {', '.join(COLUMNS)}) "
            f"SELECT ?::VARCHAR, {', '.join(COLUMNS)} FROM _infbench_gpu_batch", [run_id])
        cur.unregister("_infbench_gpu_batch")
    finally:
        cur.close()
    return len(rows)
