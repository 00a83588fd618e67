"""Runs made by several load-generator workers: one row per worker, and the worker of each row.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration. `infbench.loadgen.workers` writes it (`infbench run --workers N`, `--ray ADDRESS`);
`docs/store.md` says what every column means.

``run_workers`` is one row per worker of a run: where it ran (process or Ray actor, node,
host, pid), its share of the load, what it planned, sent and shipped, what was lost when it
died, and its clock: the node's monotonic clock minus the coordinator's, measured by round
trips (offset = the midpoint of the fastest round trip, uncertainty = half its length). On
one host (same kernel boot) the clock is shared and the offset applied is 0; the
measurement is kept as a check.

``requests.worker`` and ``client_samples.worker`` name the worker a row came from (NULL for a
run made by one process).
"""

from __future__ import annotations

WORKERS_MIGRATION_DESCRIPTION = (
    "run_workers: one row per load-generator worker (process or Ray actor: share, losses, clock "
    "offset and uncertainty); requests and client_samples carry their worker"
)

WORKERS_TABLE = "run_workers"

WORKER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR NOT NULL"),
    ("worker", "INTEGER NOT NULL"),        # 0 .. N-1
    ("backend", "VARCHAR NOT NULL"),       # process | ray
    ("node", "VARCHAR"),                   # Ray node id; the hostname for a process worker
    ("hostname", "VARCHAR"),
    ("pid", "INTEGER"),
    ("concurrency", "INTEGER"),            # its slots (closed loop) or in-flight cap (open loop)
    ("session_share", "DOUBLE"),           # fraction of the sessions assigned to it
    ("planned_requests", "INTEGER"),       # NULL when the stop condition leaves it open
    ("sent_requests", "INTEGER"),          # last count it reported
    ("stored_requests", "INTEGER"),        # request rows that reached the store from it
    ("lost_requests", "INTEGER"),          # planned or sent, never stored (0 when it finished)
    ("status", "VARCHAR NOT NULL"),        # completed | died | lost | failed
    ("reason", "VARCHAR"),
    ("clock_shared", "BOOLEAN"),           # same host and boot: offset applied is 0
    ("clock_offset_ns", "BIGINT"),         # node monotonic - coordinator monotonic (measured)
    ("clock_uncertainty_ns", "BIGINT"),    # half the fastest round trip
    ("clock_rtt_min_ns", "BIGINT"),
    ("clock_rounds", "INTEGER"),
)

WORKERS_DDL: tuple[str, ...] = (
    f"CREATE TABLE {WORKERS_TABLE} (\n  " + ",\n  ".join(f"{n} {t}" for n, t in WORKER_COLUMNS) + "\n)",
)
