"""The infbench store schema, version by version.

One DuckDB file holds everything a run produced. Every table is keyed by ``run_id``.
Times inside a run are integer nanoseconds on the client's monotonic clock, relative to
the run's ``runs.t0_monotonic_ns`` (so ``t_ns = 0`` is the moment the run started).
JSON documents are stored as VARCHAR holding JSON text (query them with ``json_extract``).

Tables (schema version 1)

``schema_version``
    One row per applied migration: ``version``, ``applied_at``, ``description``.
``runs``
    One row per run: ``status`` is ``running`` | ``completed`` | ``completed_with_errors`` | ``interrupted`` |
    ``failed``
    (``status_reason`` says why when not completed); ``config`` is the full resolved run
    configuration (never holds an API key); ``summary`` is the summary JSON written at the end;
    ``client_bound`` is true when the client, not the target, limited the run.
``requests``
    One row per request sent (including warm-up/cool-down: ``phase`` says which).
    ``intended_send_ns`` is the arrival schedule, ``send_ns`` the moment the request was handed
    to the socket. ``first_content_ns`` / ``last_content_ns`` bound the content-carrying chunks,
    ``last_chunk_ns`` is the last SSE event of any kind, ``end_ns`` is when the stream closed. ``error_class`` is NULL for a good request, else one of
    ``http_<status>``, ``timeout``, ``connection_refused``, ``connection_reset``,
    ``connection_error``, ``truncated_sse``, ``malformed_sse``, ``invalid_utf8``, ``server_error``
    (an error event inside the stream), ``cancelled`` (the run was interrupted).
    ``output_tokens_source`` is ``usage`` (the server's usage block) or ``counted`` (one per
    content-carrying chunk). ``response_id`` is the id the server gave the completion and
    ``server_request_id`` its ``x-request-id`` header, for joining with server logs.
``chunks``
    One row per SSE event. ``t_ns`` is when the bytes that completed the event arrived: the
    kernel's receive stamp on Linux (``SO_TIMESTAMPNS``, moved to the monotonic clock), else
    the moment the event loop saw the socket readable. ``read_idx`` numbers the reads that
    complete events within the request, so several events that arrived in one
    read share a ``read_idx`` and ``coalesced`` is true for every content chunk that arrived in
    the same read as the previous content chunk (its ITL is 0 ms because the client could not
    tell the events apart, not because the server sent them at once).
``metric_samples``
    Scrapes of the target's Prometheus ``/metrics``: ``name``, ``labels`` (``k="v",...`` as
    printed), ``value``.
``engine_steps``
    The reference engine's per-step log (``/engine/steps``); ``start_s``/``end_s`` are the
    engine's monotonic seconds, which on the same host is the client's clock
    (``start_s * 1e9 - runs.t0_monotonic_ns`` puts a step on the run's time axis).
``client_samples``
    The load generator's own health once per sampling interval: in-flight requests,
    event-loop lag, schedule lag, CPU use, resident memory.

Views: ``request_latency`` (TTFT, e2e, TPOT from the actual and from the intended send, in ms)
and ``itl`` (gaps between consecutive content chunks of a request, in ms).

``sweeps`` / ``sweep_points`` (version 2)
    ``infbench sweep``: the sweep's settings and analysed ``result`` (JSON), and for each point
    (``point_idx`` in run order) its run and load: ``kind`` is ``concurrency`` or ``rate``.

``diagnoses`` / ``findings`` (version 3)
    What a playbook (``infbench diagnose NAME RUN``) concluded about a run. ``diagnoses`` has
    one row per (run, playbook) that was diagnosed, even when nothing was found: when
    (``created_at``), the inputs that existed (``data_sources``, JSON object name -> bool),
    the baseline numbers shown with any result (``context``, JSON) and caveats about the data
    (``notes``, JSON list). ``findings`` has one row per finding, ``finding_idx`` in the
    playbook's order (most severe first): ``verdict`` (stable id of the named cause), ``title``,
    ``severity`` (``info`` | ``warning`` | ``critical``), ``confidence`` (0..1), ``summary``,
    ``next_actions`` (JSON list of strings), ``evidence`` (JSON list of ``{name, values, sql,
    note}``: the numbers and the SQL that produced them, rerunnable against this store) and
    ``data_sources`` as above. Diagnosing a run again replaces that playbook's rows.

Version 4
    ``requests`` gains ``last_choices_ns`` (the last event carrying ``choices``: where e2e and
    TPOT end), ``usage_ns`` (the usage event) and ``done_ns`` (``[DONE]``); a server that sends
    usage or ``[DONE]`` late no longer lengthens e2e (``request_latency.trailing_ms`` shows the
    delay). ``runs.workload_fingerprint`` is a hash of the arrival schedule and the lengths the
    run asked for: two runs with the same fingerprint sent the same requests in the same
    order, so the gate can pair them request by request. ``runs.status`` may be
    ``completed_with_errors``. The ``itl`` view spreads the gap before a read over the content
    events that read delivered (``itl_ms``) and keeps the per-event gap (``raw_itl_ms``).

Version 5
    ``configs``, ``config_values``, ``bisections``, ``bisect_probes``: see
    ``infbench.store.config_schema``.

Version 7
    ``gpu_samples``: GPU telemetry per GPU per sample; see ``infbench.store.gpu_schema``.

Version 8 (fleet runs: one workload over several replicas)
    ``requests`` gains ``replica`` (the replica the router sent it to; NULL for a run against
    one URL) and ``replica_concurrency`` (requests in flight on that replica, this one
    included, when it was sent (counted as it joined the send queue): the load it met, for comparisons at matched
    load); ``metric_samples`` and ``engine_steps`` gain ``replica`` (whose /metrics or step
    log the row came from).

Version 9
    ``link_probes``, ``collectives``: collective and point-to-point link measurements
    (``infbench probe links``, imported nccl-tests output); see ``infbench.store.links_schema``.

Version 10
    ``prometheus_pulls`` (a run's window pulled from a Prometheus server; the samples go to
    ``metric_samples`` with ``source = 'prometheus'``) and ``runs.t0_unix_ns`` (the run's
    start on the Unix clock); see ``infbench.store.prometheus_schema``.

Version 11
    ``hang_captures``, ``hang_ranks``, ``hang_pg_config``, ``hang_pg_status``,
    ``hang_fr_entries``, ``hang_stacks``: every rank's Flight Recorder dump and Python stacks
    captured from a hung engine (``infbench diagnose hang``); see ``infbench.store.hang_schema``.

Version 12
    ``memory_samples`` (memory series scraped during a run), ``startup_logs`` /
    ``startup_events`` (engine start-up logs) and the ``kv_ledger`` view; see
    ``infbench.store.memory_schema``.

Version 13
    ``run_workers`` (one row per load-generator worker: share, losses, clock offset) and
    ``requests.worker`` / ``client_samples.worker``; see ``infbench.store.workers_schema``.

Version 15
    ``watch_triggers`` and ``watch_metrics``: incidents the live watch of ``infbench run``
    noticed and what it captured while they lasted; see ``infbench.store.watch_schema``.

Version 16
    ``engine_steps`` gains the structured-output fields of the reference engine's step log
    (grammar compiles, cache lookups, token masks); see ``infbench.store.structured_schema``.

Version 17
    ``engine_steps`` gains speculative decoding's drafted and accepted tokens per step; see
    ``infbench.store.specdec_schema``.

Version 18
    ``requests`` gains ``tenant`` and ``adapter``, ``engine_steps`` the LoRA fields of the
    reference engine's step log, ``request_latency`` the two request columns; see
    ``infbench.store.tenants_schema``.

Later packages (probes, playbooks) add their tables as further migrations in ``MIGRATIONS``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from infbench.store.config_schema import CONFIG_DDL, CONFIG_MIGRATION_DESCRIPTION
from infbench.store.gpu_schema import GPU_DDL, GPU_MIGRATION_DESCRIPTION
from infbench.store.hang_schema import HANG_DDL, HANG_MIGRATION_DESCRIPTION
from infbench.store.links_schema import LINKS_DDL, LINKS_MIGRATION_DESCRIPTION
from infbench.store.memory_schema import (
    MEMORY_DDL,
    MEMORY_MIGRATION_DESCRIPTION,
    MEMORY_SAMPLE_COLUMNS,
)
from infbench.store.prometheus_schema import PROMETHEUS_DDL, PROMETHEUS_MIGRATION_DESCRIPTION
from infbench.store.specdec_schema import SPEC_MIGRATION_DESCRIPTION, SPEC_STEP_COLUMNS
from infbench.store.structured_schema import (
    STRUCTURED_MIGRATION_DESCRIPTION,
    STRUCTURED_STEP_COLUMNS,
)
from infbench.store.tenants_schema import (
    LORA_STEP_COLUMNS,
    TENANT_REQUEST_COLUMNS,
    TENANTS_MIGRATION_DESCRIPTION,
)
from infbench.store.trace_schema import TRACE_DDL, TRACE_MIGRATION_DESCRIPTION
from infbench.store.views import VIEWS_V1, VIEWS_V4, VIEWS_V18
from infbench.store.watch_schema import WATCH_DDL, WATCH_MIGRATION_DESCRIPTION
from infbench.store.workers_schema import WORKERS_DDL, WORKERS_MIGRATION_DESCRIPTION

# Column lists are the single source of truth: the DDL and the Arrow schema used by the
# bulk writer are both generated from them, so they cannot drift apart.
_T = {
    "VARCHAR": pa.string(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us"),
}


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, DuckDB type); run_id comes first
    # Columns added by a later migration: name -> schema version that added it. A table is
    # created as its first version had it and grown by ALTER TABLE, so a store migrated from
    # any version ends with the same columns in the same order as a new one.
    added: tuple[tuple[str, int], ...] = ()

    def _since(self, col: str) -> int:
        return dict(self.added).get(col, 1)

    def ddl(self, version: int = 1) -> str:
        cols = ",\n  ".join(f"{n} {t}" for n, t in self.columns if self._since(n) <= version)
        return f"CREATE TABLE {self.name} (\n  {cols}\n)"

    def add_columns_ddl(self, version: int) -> tuple[str, ...]:
        return tuple(f"ALTER TABLE {self.name} ADD COLUMN {n} {t}"
                     for n, t in self.columns if self._since(n) == version)

    def arrow_schema(self) -> pa.Schema:
        """Schema of a batch handed to the writer: every column but run_id."""
        return pa.schema([(n, _T[t]) for n, t in self.columns if n != "run_id"])

    @property
    def batch_columns(self) -> list[str]:
        return [n for n, _ in self.columns if n != "run_id"]


REQUESTS = Table(
    "requests",
    (
        ("run_id", "VARCHAR"),
        ("request_idx", "INTEGER"),
        ("label", "VARCHAR"),
        ("phase", "VARCHAR"),
        ("conversation_id", "INTEGER"),
        ("turn", "INTEGER"),
        ("intended_send_ns", "BIGINT"),
        ("send_ns", "BIGINT"),
        ("headers_ns", "BIGINT"),
        ("first_chunk_ns", "BIGINT"),
        ("first_content_ns", "BIGINT"),
        ("last_content_ns", "BIGINT"),
        ("last_chunk_ns", "BIGINT"),
        ("end_ns", "BIGINT"),
        ("status_code", "INTEGER"),
        ("error_class", "VARCHAR"),
        ("error_message", "VARCHAR"),
        ("target_input_tokens", "INTEGER"),
        ("prompt_tokens", "INTEGER"),
        ("prompt_tokens_source", "VARCHAR"),
        ("max_tokens", "INTEGER"),
        ("output_tokens", "INTEGER"),
        ("output_tokens_source", "VARCHAR"),
        ("cached_tokens", "INTEGER"),
        ("num_chunks", "INTEGER"),
        ("num_content_chunks", "INTEGER"),
        ("num_reads", "INTEGER"),
        ("coalesced_chunks", "INTEGER"),
        ("response_bytes", "BIGINT"),
        ("finish_reason", "VARCHAR"),
        ("response_id", "VARCHAR"),
        ("server_request_id", "VARCHAR"),
        ("last_choices_ns", "BIGINT"),
        ("usage_ns", "BIGINT"),
        ("done_ns", "BIGINT"),
        ("replica", "VARCHAR"),
        ("replica_concurrency", "INTEGER"),
        ("worker", "INTEGER"),
        *TENANT_REQUEST_COLUMNS,
    ),
    added=(("last_choices_ns", 4), ("usage_ns", 4), ("done_ns", 4), ("replica", 8),
           ("replica_concurrency", 8), ("worker", 13),
           *((name, 18) for name, _ in TENANT_REQUEST_COLUMNS)),
)

CHUNKS = Table(
    "chunks",
    (
        ("run_id", "VARCHAR"),
        ("request_idx", "INTEGER"),
        ("seq", "INTEGER"),
        ("t_ns", "BIGINT"),
        ("read_idx", "INTEGER"),
        ("nbytes", "INTEGER"),
        ("content", "BOOLEAN"),
        ("coalesced", "BOOLEAN"),
    ),
)

METRIC_SAMPLES = Table(
    "metric_samples",
    (
        ("run_id", "VARCHAR"),
        ("t_ns", "BIGINT"),
        ("source", "VARCHAR"),
        ("name", "VARCHAR"),
        ("labels", "VARCHAR"),
        ("value", "DOUBLE"),
        ("replica", "VARCHAR"),
    ),
    added=(("replica", 8),),
)

ENGINE_STEPS = Table(
    "engine_steps",
    (
        ("run_id", "VARCHAR"),
        ("step_id", "BIGINT"),
        ("start_s", "DOUBLE"),
        ("end_s", "DOUBLE"),
        ("prefill_tokens", "INTEGER"),
        ("decode_seqs", "INTEGER"),
        ("num_running", "INTEGER"),
        ("num_waiting", "INTEGER"),
        ("preemptions", "INTEGER"),
        ("kv_blocks_used", "INTEGER"),
        ("kv_blocks_total", "INTEGER"),
        ("fault", "VARCHAR"),
        ("replica", "VARCHAR"),
        *STRUCTURED_STEP_COLUMNS,
        *SPEC_STEP_COLUMNS,
        *LORA_STEP_COLUMNS,
    ),
    added=(("replica", 8), *((name, 16) for name, _ in STRUCTURED_STEP_COLUMNS),
           *((name, 17) for name, _ in SPEC_STEP_COLUMNS),
           *((name, 18) for name, _ in LORA_STEP_COLUMNS)),
)

CLIENT_SAMPLES = Table(
    "client_samples",
    (
        ("run_id", "VARCHAR"),
        ("t_ns", "BIGINT"),
        ("in_flight", "INTEGER"),
        ("completed", "INTEGER"),
        ("errors", "INTEGER"),
        ("loop_lag_ms", "DOUBLE"),
        ("schedule_lag_ms", "DOUBLE"),
        ("cpu_percent", "DOUBLE"),
        ("rss_bytes", "BIGINT"),
        ("worker", "INTEGER"),
    ),
    added=(("worker", 13),),
)

# The bulk tables migration 1 created; a later bulk table is created by its own migration.
_V1_BULK_TABLES = (REQUESTS, CHUNKS, METRIC_SAMPLES, ENGINE_STEPS, CLIENT_SAMPLES)
MEMORY_SAMPLES = Table("memory_samples", MEMORY_SAMPLE_COLUMNS, added=(("replica", 14),))  # version 12

BULK_TABLES: dict[str, Table] = {t.name: t for t in (*_V1_BULK_TABLES, MEMORY_SAMPLES)}

DIAGNOSES = Table(
    "diagnoses",
    (
        ("run_id", "VARCHAR"),
        ("playbook", "VARCHAR"),
        ("created_at", "TIMESTAMP"),
        ("data_sources", "VARCHAR"),
        ("context", "VARCHAR"),
        ("notes", "VARCHAR"),
    ),
)

FINDINGS = Table(
    "findings",
    (
        ("run_id", "VARCHAR"),
        ("playbook", "VARCHAR"),
        ("finding_idx", "INTEGER"),
        ("created_at", "TIMESTAMP"),
        ("verdict", "VARCHAR"),
        ("title", "VARCHAR"),
        ("severity", "VARCHAR"),
        ("confidence", "DOUBLE"),
        ("summary", "VARCHAR"),
        ("next_actions", "VARCHAR"),
        ("evidence", "VARCHAR"),
        ("data_sources", "VARCHAR"),
    ),
)

# Tables keyed by run_id that are not bulk-written: exported and imported with the run.
DIAGNOSIS_TABLES: dict[str, Table] = {t.name: t for t in (DIAGNOSES, FINDINGS)}

RUNS_DDL = """
CREATE TABLE runs (
  run_id VARCHAR PRIMARY KEY,
  created_at TIMESTAMP NOT NULL,
  finished_at TIMESTAMP,
  status VARCHAR NOT NULL,
  status_reason VARCHAR,
  target_url VARCHAR,
  model VARCHAR,
  endpoint VARCHAR,
  config VARCHAR,
  summary VARCHAR,
  client_bound BOOLEAN,
  t0_monotonic_ns BIGINT,
  infbench_version VARCHAR,
  hostname VARCHAR,
  pid INTEGER
)
"""

@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "initial schema: runs, requests, chunks, metric_samples, engine_steps, client_samples",
        (RUNS_DDL, *(t.ddl() for t in _V1_BULK_TABLES), *VIEWS_V1),
    ),
    Migration(
        2,
        "sweeps: one row per sweep, one per point linking it to its run",
        (
            "CREATE TABLE sweeps (sweep_id VARCHAR PRIMARY KEY, created_at TIMESTAMP NOT NULL, "
            "mode VARCHAR NOT NULL, config VARCHAR, result VARCHAR)",
            "CREATE TABLE sweep_points (sweep_id VARCHAR NOT NULL, point_idx INTEGER NOT NULL, "
            "run_id VARCHAR NOT NULL, kind VARCHAR NOT NULL, value DOUBLE NOT NULL)",
        ),
    ),
    Migration(
        3,
        "diagnoses and findings: what `infbench diagnose` concluded about a run",
        tuple(t.ddl() for t in DIAGNOSIS_TABLES.values()),
    ),
    Migration(
        4,
        "requests end at the last choices event (usage and [DONE] stamped apart); ITL spread "
        "over coalesced reads; runs carry their workload fingerprint",
        (
            *REQUESTS.add_columns_ddl(4),
            "ALTER TABLE runs ADD COLUMN workload_fingerprint VARCHAR",
            *VIEWS_V4,
        ),
    ),
    Migration(5, CONFIG_MIGRATION_DESCRIPTION, CONFIG_DDL),
    Migration(6, TRACE_MIGRATION_DESCRIPTION, TRACE_DDL),
    Migration(7, GPU_MIGRATION_DESCRIPTION, GPU_DDL),
    Migration(
        8,
        "fleet runs: requests carry their replica and its concurrency at send; metric samples "
        "and engine steps carry the replica they came from",
        (*REQUESTS.add_columns_ddl(8), *METRIC_SAMPLES.add_columns_ddl(8),
         *ENGINE_STEPS.add_columns_ddl(8)),
    ),
    Migration(9, LINKS_MIGRATION_DESCRIPTION, LINKS_DDL),
    Migration(10, PROMETHEUS_MIGRATION_DESCRIPTION, PROMETHEUS_DDL),
    Migration(11, HANG_MIGRATION_DESCRIPTION, HANG_DDL),
    Migration(12, MEMORY_MIGRATION_DESCRIPTION, (MEMORY_SAMPLES.ddl(12), *MEMORY_DDL)),
    Migration(13, WORKERS_MIGRATION_DESCRIPTION,
              (*REQUESTS.add_columns_ddl(13), *CLIENT_SAMPLES.add_columns_ddl(13), *WORKERS_DDL)),
    Migration(14, "fleet runs: memory samples carry the replica they were scraped from",
              MEMORY_SAMPLES.add_columns_ddl(14)),
    Migration(15, WATCH_MIGRATION_DESCRIPTION, WATCH_DDL),
    Migration(16, STRUCTURED_MIGRATION_DESCRIPTION, ENGINE_STEPS.add_columns_ddl(16)),
    Migration(17, SPEC_MIGRATION_DESCRIPTION, ENGINE_STEPS.add_columns_ddl(17)),
    Migration(18, TENANTS_MIGRATION_DESCRIPTION,
              (*REQUESTS.add_columns_ddl(18), *ENGINE_STEPS.add_columns_ddl(18), *VIEWS_V18)),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
