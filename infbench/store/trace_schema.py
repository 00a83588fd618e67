"""Schema version 6: imported profiler traces (PyTorch profiler / Kineto JSON, Nsight Systems
SQLite), in tables shared by both sources.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration after version 5. `probes.traces` writes these tables (`infbench trace import`);
`docs/store.md` says what every column means.

One trace is one import: a file, or a directory holding one file per rank. Event tables are
keyed by (``trace_id``, ``rank``). Times are integer nanoseconds on the trace's own clock
(``start_ns``/``end_ns``): Kineto's ``ts`` (microseconds, relative to
``baseTimeNanoseconds``) times 1000, or Nsight's session-relative nanoseconds;
``trace_ranks.epoch_offset_ns`` added to them gives Unix nanoseconds where the file says.
``event_id`` is the event's position in the source (its index in Kineto's ``traceEvents``,
its row id in the Nsight table), so a row can be found again in the file.
"""

from __future__ import annotations

TRACE_MIGRATION_DESCRIPTION = (
    "traces and trace_ranks: imported profiler traces (Kineto JSON, Nsight Systems SQLite); "
    "trace_gpu_ops, trace_api_calls, trace_cpu_ops, trace_annotations, trace_collectives: "
    "their events on one time axis per rank"
)

_EVENT = "trace_id VARCHAR NOT NULL, rank INTEGER NOT NULL, event_id BIGINT NOT NULL, name VARCHAR"
_SPAN = "start_ns BIGINT NOT NULL, end_ns BIGINT"

TRACE_TABLES: tuple[str, ...] = (
    "traces", "trace_ranks", "trace_gpu_ops", "trace_api_calls", "trace_cpu_ops",
    "trace_annotations", "trace_collectives",
)

TRACE_DDL: tuple[str, ...] = (
    "CREATE TABLE traces (trace_id VARCHAR PRIMARY KEY, run_id VARCHAR, source VARCHAR NOT NULL, "
    "path VARCHAR, imported_at TIMESTAMP NOT NULL, format_version VARCHAR, producer VARCHAR, "
    "ranks INTEGER NOT NULL, events BIGINT NOT NULL, notes VARCHAR)",
    "CREATE TABLE trace_ranks (trace_id VARCHAR NOT NULL, rank INTEGER NOT NULL, path VARCHAR, "
    "world_size INTEGER, epoch_offset_ns BIGINT, start_ns BIGINT, end_ns BIGINT, "
    "round_to_us BOOLEAN NOT NULL, devices VARCHAR, metadata VARCHAR)",
    f"CREATE TABLE trace_gpu_ops ({_EVENT}, kind VARCHAR NOT NULL, category VARCHAR, "
    f"device INTEGER, stream BIGINT, {_SPAN}, correlation BIGINT, external_id BIGINT, "
    "bytes BIGINT, copy_kind VARCHAR, grid VARCHAR, block VARCHAR, registers_per_thread INTEGER)",
    f"CREATE TABLE trace_api_calls ({_EVENT}, kind VARCHAR NOT NULL, pid BIGINT, tid BIGINT, "
    f"{_SPAN}, correlation BIGINT, external_id BIGINT, cbid INTEGER, return_value BIGINT)",
    f"CREATE TABLE trace_cpu_ops ({_EVENT}, kind VARCHAR NOT NULL, pid BIGINT, tid BIGINT, "
    f"{_SPAN}, external_id BIGINT, sequence_number BIGINT)",
    f"CREATE TABLE trace_annotations ({_EVENT}, kind VARCHAR NOT NULL, pid BIGINT, tid BIGINT, "
    f"stream BIGINT, domain VARCHAR, {_SPAN}, external_id BIGINT)",
    f"CREATE TABLE trace_collectives ({_EVENT}, op VARCHAR, device INTEGER, stream BIGINT, "
    f"{_SPAN}, correlation BIGINT, algorithm VARCHAR, protocol VARCHAR, dtype VARCHAR, "
    "in_elements BIGINT, out_elements BIGINT, message_bytes BIGINT, group_size INTEGER, "
    "process_group VARCHAR)",
)
