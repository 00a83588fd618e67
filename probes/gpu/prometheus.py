"""dcgm-exporter series read from a Prometheus server -> `gpu_samples` (source `dcgm`).

`infbench metrics pull` / `infbench run --prometheus` (probes.prometheus) store the run
window's series as they come, in `metric_samples` with source 'prometheus' and the labels as
`k="v",...` text; the DCGM_* ones among them (current and renamed field names) become one
`gpu_samples` row per GPU per query step here. The replica is the series' `instance` label
(the scrape target, host:port) unless the caller names it; GPUs are told apart by `gpu` and
`UUID`. A second pull of the same run replaces the rows the first one produced.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from infbench.store import get_run, open_store
from infbench.store.gpu_samples import insert_gpu_samples
from probes.gpu.dcgm import FIELDS, rows_from_points
from probes.gpu.run_metrics import parse_labels

SOURCE = "prometheus"  # metric_samples.source of a Prometheus pull


def gpu_samples_from_prometheus(con: duckdb.DuckDBPyConnection, run_id: str,
                                instance: str | None = None) -> int:
    """Convert the run's pulled DCGM series into gpu_samples rows; returns the rows written."""
    names = sorted(FIELDS)
    stored = con.execute(
        "SELECT t_ns, name, labels, value FROM metric_samples "
        f"WHERE run_id = ? AND source = ? AND name IN ({', '.join('?' * len(names))}) "
        "ORDER BY t_ns", [run_id, SOURCE, *names]).fetchall()
    rows = rows_from_points(((int(t), n, parse_labels(lab), v) for t, n, lab, v in stored),
                            source="dcgm", instance=instance)
    instances = sorted({r["instance"] or "" for r in rows})
    con.execute("BEGIN")
    try:
        # A re-pull replaces its own rows: the same run, source and replicas (rows another
        # path stored for other replicas stay).
        for inst in instances:
            con.execute("DELETE FROM gpu_samples WHERE run_id = ? AND source = 'dcgm' "
                        "AND coalesce(instance, '') = ?", [run_id, inst])
        n = insert_gpu_samples(con, run_id, rows)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return n


def convert_pulled(db: str | Path, run_ref: str) -> int:
    """`gpu_samples_from_prometheus` on a store file (the run given as the commands take it)."""
    con = open_store(db)
    try:
        return gpu_samples_from_prometheus(con, get_run(con, run_ref).run_id)
    finally:
        con.close()
