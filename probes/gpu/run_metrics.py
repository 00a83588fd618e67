"""GPU telemetry a run scraped from its targets' `/metrics` (and dcgm-exporter endpoints),
moved from `metric_samples` into `gpu_samples` after the run.

The load generator stores every series it scrapes as it is (`metric_samples`, tagged with
the replica in a fleet run); the dcgm-exporter-named series among them become one
`gpu_samples` row per GPU per scrape here, with the replica as `instance` (the target URL for
a one-target run). Series from an engine's own `/metrics` (the reference engine's simulated
device) are source `engine`, those from a dcgm-exporter endpoint source `dcgm`.
"""

from __future__ import annotations

import duckdb

from infbench import promtext
from infbench.store.gpu_samples import insert_gpu_samples
from probes.gpu.dcgm import FIELDS, rows_from_points


def parse_labels(text: str | None) -> dict[str, str]:
    """`k="v",...` as `metric_samples.labels` keeps them -> a dict, escapes undone
    (`infbench.promtext`). Lenient: a scrape stored whatever the target printed, and one
    unreadable label text must not stop the run's conversion."""
    return promtext.parse_labels(text or "", strict=False)


def gpu_samples_from_run(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Insert the run's scraped GPU series into `gpu_samples`; returns the rows written.
    A run whose engine/dcgm rows are already there is left as it is (idempotent)."""
    done = con.execute("SELECT count(*) FROM gpu_samples WHERE run_id = ? AND source IN ('engine', 'dcgm')",
                       [run_id]).fetchone()
    if done and done[0]:
        return 0
    names = sorted(FIELDS)
    rows = con.execute(
        "SELECT m.replica, m.source, m.t_ns, m.name, m.labels, m.value, r.target_url "
        "FROM metric_samples m JOIN runs r USING (run_id) "
        f"WHERE m.run_id = ? AND m.name IN ({', '.join('?' * len(names))}) "
        "ORDER BY m.replica, m.source, m.t_ns", [run_id, *names]).fetchall()
    groups: dict[tuple[str, str], list[tuple[int, str, dict[str, str], float]]] = {}
    for replica, source, t_ns, name, labels, value, target_url in rows:
        key = (replica or target_url or "", "dcgm" if source == "dcgm" else "engine")
        groups.setdefault(key, []).append((int(t_ns), name, parse_labels(labels), value))
    out = []
    for (instance, source), points in groups.items():
        out.extend(rows_from_points(points, source=source, instance=instance))
    return insert_gpu_samples(con, run_id, out)
