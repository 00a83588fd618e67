"""Prometheus as a source: where a run's window was pulled from, and the run's wall-clock start.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration. `probes.prometheus` writes it (`infbench run --prometheus URL`, `infbench metrics
pull RUN --prometheus URL`); `docs/store.md` says what every column means.

The samples themselves go to `metric_samples` with ``source = 'prometheus'``: ``name`` is the
series' ``__name__`` as Prometheus returned it (a vLLM version's own name, e.g.
``vllm:gpu_cache_usage_perc`` or ``vllm:kv_cache_usage_perc``), ``labels`` its other labels
(``k="v",...``, sorted), ``t_ns`` the sample's Unix time put on the run's axis with
``runs.t0_unix_ns``. Histograms are stored as their ``_bucket`` (with ``le``), ``_sum`` and
``_count`` counters, so any percentile over any sub-window can be recomputed from the file.

``runs.t0_unix_ns`` is the run's start (``t_ns = 0``) on the Unix clock: the monotonic
clock the run is timed on has no meaning to another host, and Prometheus stamps samples in
Unix time. NULL for runs recorded before this version (a pull then falls back to
``created_at`` and says so).
"""

from __future__ import annotations

PROMETHEUS_MIGRATION_DESCRIPTION = (
    "prometheus_pulls: each pull of a run's window from a Prometheus server (samples go to "
    "metric_samples with source 'prometheus'); runs.t0_unix_ns: the run's start on the Unix clock"
)

# Keyed by run_id: exported and imported with the run (`infbench.store.transfer`).
PROMETHEUS_TABLES: tuple[str, ...] = ("prometheus_pulls",)

PROMETHEUS_PULL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR NOT NULL"),
    ("pull_idx", "INTEGER NOT NULL"),      # 0, 1, ... per run; a new pull replaces the samples
    ("pulled_at", "TIMESTAMP NOT NULL"),
    ("url", "VARCHAR NOT NULL"),           # the server, as given (credentials are refused in it)
    ("selector", "VARCHAR"),               # label matchers that chose the target's series
    ("start_unix_s", "DOUBLE NOT NULL"),   # the window queried
    ("end_unix_s", "DOUBLE NOT NULL"),
    ("step_s", "DOUBLE NOT NULL"),
    ("queries", "INTEGER NOT NULL"),       # range queries sent
    ("failed_queries", "INTEGER NOT NULL"),
    ("series", "INTEGER NOT NULL"),        # series stored
    ("samples", "BIGINT NOT NULL"),        # rows added to metric_samples
    ("status", "VARCHAR NOT NULL"),        # ok | partial | empty | failed
    ("warnings", "VARCHAR"),               # JSON list: what went wrong, one line each
    ("families", "VARCHAR"),               # JSON object: family -> series found
)

PROMETHEUS_DDL: tuple[str, ...] = (
    "ALTER TABLE runs ADD COLUMN t0_unix_ns BIGINT",
    "CREATE TABLE prometheus_pulls (\n  "
    + ",\n  ".join(f"{n} {t}" for n, t in PROMETHEUS_PULL_COLUMNS) + "\n)",
)
