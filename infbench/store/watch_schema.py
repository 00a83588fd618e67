"""What the live watch of `infbench run` saw and captured while the run lasted.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration. `infbench run` writes these tables after the load (the captures are taken during
it, off the load loop); the triage (`infbench diagnose RUN`) and `docs/store.md` read them.

``watch_triggers``: one row per incident the watch noticed (an engine-wide stop of tokens,
an error burst, a replica departing from its peers at equal load), when (``t_s``, seconds
from the run's start), what it measured (``detail``), what was captured (``captured``) and
what was not and why (``failed``); the stacks and Flight Recorder dumps it took are a hang
capture (``hang_capture_id`` -> ``hang_captures``, linked to the same run).
``watch_metrics``: each target's ``/metrics`` page as it was at the trigger (text, capped).
"""

from __future__ import annotations

WATCH_MIGRATION_DESCRIPTION = (
    "watch_triggers, watch_metrics: incidents the live watch of `infbench run` noticed and "
    "the evidence it captured while they lasted"
)

WATCH_TABLES: tuple[str, ...] = ("watch_triggers", "watch_metrics")

TRIGGER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trigger_id", "VARCHAR PRIMARY KEY"),
    ("run_id", "VARCHAR NOT NULL"),
    ("seq", "INTEGER NOT NULL"),           # 0, 1, ... in the order the watch saw them
    ("kind", "VARCHAR NOT NULL"),          # engine_stopped | error_burst | replica_departs
    ("t_s", "DOUBLE NOT NULL"),            # seconds from the run's start
    ("replica", "VARCHAR"),                # the target it concerns (fleet runs), else NULL
    ("summary", "VARCHAR NOT NULL"),       # one line, as printed after the run
    ("detail", "VARCHAR"),                 # JSON: what the watch measured
    ("captured", "VARCHAR"),               # JSON list: what was taken
    ("failed", "VARCHAR"),                 # JSON list of {"what", "why"}: what was not
    ("capture_s", "DOUBLE"),               # how long the capture took (NULL: none taken)
    ("hang_capture_id", "VARCHAR"),        # the stacks/dumps taken, in hang_captures
)

METRICS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trigger_id", "VARCHAR NOT NULL"),
    ("target", "VARCHAR"),                 # the replica's name, NULL for one target
    ("url", "VARCHAR NOT NULL"),           # the page read (credentials never kept)
    ("t_s", "DOUBLE"),                     # when it was read, seconds from the run's start
    ("status", "VARCHAR NOT NULL"),        # ok | failed
    ("bytes", "BIGINT"),
    ("truncated", "BOOLEAN"),              # the page was longer than the cap
    ("body", "VARCHAR"),
    ("error", "VARCHAR"),
)

WATCH_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "watch_triggers": TRIGGER_COLUMNS, "watch_metrics": METRICS_COLUMNS,
}

WATCH_DDL: tuple[str, ...] = tuple(
    f"CREATE TABLE {name} (" + ", ".join(f"{c} {t}" for c, t in cols) + ")"
    for name, cols in WATCH_COLUMNS.items()
)
