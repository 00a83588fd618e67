"""Schema version 12: the memory ledger of a run and the engine start-up logs.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration. `docs/store.md` says what every column means.

``memory_samples`` (a bulk table, written during `infbench run`)
    One row per scrape of the target's ``/metrics``: the memory-related series picked out of
    it (KV blocks used and total, preemptions, running and waiting requests, finished
    requests, the process's resident memory, the torch allocator's counters where the engine
    exposes them). NULL where the target did not expose the series.
``startup_logs`` / ``startup_events`` (written by `probes.startup_log`)
    One row per imported engine start-up log (vLLM V0/V1, SGLang, the reference engine) and
    one per memory figure it printed, in the order printed, with the rank that printed it.
``kv_ledger`` (a view over ``engine_steps``)
    The KV pool page by page for every engine step: blocks used, free, the change since the
    previous step and preemptions so far.
"""

from __future__ import annotations

MEMORY_MIGRATION_DESCRIPTION = (
    "memory_samples: memory series scraped from the target during a run; startup_logs and "
    "startup_events: engine start-up logs and the memory figures they printed; kv_ledger: "
    "the KV pool per engine step"
)

# (name, DuckDB type), run_id first: the single source of truth for the DDL and the Arrow
# schema the bulk writer uses (schema.MEMORY_SAMPLES is built from it).
MEMORY_SAMPLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"),
    ("t_ns", "BIGINT"),                       # run's time axis, as metric_samples.t_ns
    ("source", "VARCHAR"),                    # 'metrics': the target's /metrics
    ("kv_usage", "DOUBLE"),                   # 0..1, vllm:kv_cache_usage_perc / sglang:token_usage
    ("kv_blocks_used", "BIGINT"),
    ("kv_blocks_total", "BIGINT"),
    ("num_running", "INTEGER"),
    ("num_waiting", "INTEGER"),
    ("preemptions_total", "BIGINT"),          # counter since the engine started
    ("requests_finished_total", "BIGINT"),    # counter since the engine started
    ("process_rss_bytes", "BIGINT"),          # process_resident_memory_bytes
    ("allocator_allocated_bytes", "BIGINT"),  # torch allocator: bytes in live tensors
    ("allocator_reserved_bytes", "BIGINT"),   # torch allocator: bytes held from the device
    ("replica", "VARCHAR"),                   # fleet runs: the replica scraped (version 14)
)

MEMORY_DDL: tuple[str, ...] = (
    "CREATE TABLE startup_logs (log_id VARCHAR PRIMARY KEY, imported_at TIMESTAMP NOT NULL, "
    "path VARCHAR, engine VARCHAR NOT NULL, version VARCHAR, log_format VARCHAR NOT NULL, "
    "ranks INTEGER, lines INTEGER, settings VARCHAR, outcome VARCHAR NOT NULL, "
    "failure_kind VARCHAR, failure_phase VARCHAR, failure_line INTEGER, failure_text VARCHAR, "
    "run_id VARCHAR, notes VARCHAR)",
    "CREATE TABLE startup_events (log_id VARCHAR NOT NULL, seq INTEGER NOT NULL, "
    "line_no INTEGER NOT NULL, rank VARCHAR NOT NULL, phase VARCHAR NOT NULL, "
    "key VARCHAR NOT NULL, value DOUBLE, unit VARCHAR, text VARCHAR)",
    """
CREATE OR REPLACE VIEW kv_ledger AS
SELECT run_id, replica, step_id, start_s, end_s, kv_blocks_total, kv_blocks_used,
       kv_blocks_total - kv_blocks_used AS kv_blocks_free,
       kv_blocks_used - lag(kv_blocks_used) OVER w AS kv_blocks_delta,
       kv_blocks_used::DOUBLE / nullif(kv_blocks_total, 0) AS kv_usage,
       preemptions, sum(preemptions) OVER w AS preemptions_so_far,
       num_running, num_waiting, prefill_tokens, decode_seqs
FROM engine_steps
WINDOW w AS (PARTITION BY run_id, replica ORDER BY step_id)
""",
)
