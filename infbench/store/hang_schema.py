"""Hang captures: every rank's Flight Recorder dump and Python stacks, taken while it hung.

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration. `probes.hang` writes these tables (`infbench diagnose hang --url/--pids/--dumps`);
`playbooks.hang` reads them; `docs/store.md` says what every column means.

One capture is one look at a multi-rank engine (or one folder of dumps): a row in
``hang_captures``, keyed by ``capture_id`` and linked to a run (``run_id``) when the user
asked for it. Per rank: what was captured and what failed (``hang_ranks``), the dump's
process-group table (``hang_pg_config``) and progress counters (``hang_pg_status``), its
Flight Recorder entries as the dump holds them (``hang_fr_entries``, sizes and dtypes as JSON
lists), and each thread's Python stack, innermost frame first (``hang_stacks``).
Times ending in ``_ns`` are Unix nanoseconds (Flight Recorder stamps ``time_created_ns`` on
the wall clock), so a dump's age is ``dumped_at_ns - time_created_ns``.
"""

from __future__ import annotations

HANG_MIGRATION_DESCRIPTION = (
    "hang_captures, hang_ranks, hang_pg_config, hang_pg_status, hang_fr_entries, hang_stacks: "
    "every rank's Flight Recorder dump and Python stacks captured from a hung engine"
)

HANG_TABLES: tuple[str, ...] = ("hang_captures", "hang_ranks", "hang_pg_config",
                                "hang_pg_status", "hang_fr_entries", "hang_stacks")

# (name, DuckDB type): the single source of truth for the DDL and the writer's Arrow schemas.
CAPTURE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("capture_id", "VARCHAR PRIMARY KEY"),
    ("run_id", "VARCHAR"),                 # the run it was linked to (--run), else NULL
    ("created_at", "TIMESTAMP NOT NULL"),
    ("source", "VARCHAR NOT NULL"),        # url | pids | dumps
    ("target", "VARCHAR NOT NULL"),        # the URL, the pid list or the folder, as given
    ("world_size", "INTEGER"),             # ranks the engine reported, else ranks found
    ("hostname", "VARCHAR"),
    ("notes", "VARCHAR"),                  # JSON list: what could not be captured and why
)

RANK_COLUMNS: tuple[tuple[str, str], ...] = (
    ("capture_id", "VARCHAR NOT NULL"),
    ("rank", "INTEGER NOT NULL"),
    ("pid", "BIGINT"),
    ("alive", "BOOLEAN"),                  # the pid existed at capture (NULL: no pid known)
    ("dump_path", "VARCHAR"),
    ("dump_status", "VARCHAR NOT NULL"),   # ok | missing | refused | not_requested
    ("dump_error", "VARCHAR"),
    ("dumped_at_ns", "BIGINT"),            # the dump file's modification time (Unix ns)
    ("fr_version", "VARCHAR"),
    ("fr_entries", "INTEGER"),
    ("stack_source", "VARCHAR"),           # py-spy | faulthandler | file
    ("stack_status", "VARCHAR NOT NULL"),  # ok | permission_denied | failed | process_gone | not_requested
    ("stack_error", "VARCHAR"),
    ("stacks_at_ns", "BIGINT"),
)

PG_CONFIG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("capture_id", "VARCHAR NOT NULL"),
    ("rank", "INTEGER NOT NULL"),
    ("pg_key", "VARCHAR NOT NULL"),        # the key in the dump's pg_config
    ("pg_name", "VARCHAR"),
    ("pg_desc", "VARCHAR"),
    ("group_ranks", "VARCHAR"),            # global ranks of the group, '0,1,2,3'
    ("group_size", "INTEGER"),
)

PG_STATUS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("capture_id", "VARCHAR NOT NULL"),
    ("rank", "INTEGER NOT NULL"),
    ("pg_key", "VARCHAR NOT NULL"),        # the key in the dump's pg_status (the group's uid)
    ("last_enqueued", "BIGINT"),           # collective sequence ids; -1 = none yet
    ("last_started", "BIGINT"),
    ("last_completed", "BIGINT"),
)

FR_ENTRY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("capture_id", "VARCHAR NOT NULL"),
    ("rank", "INTEGER NOT NULL"),
    ("record_id", "BIGINT NOT NULL"),
    ("pg_id", "BIGINT"),
    ("pg_name", "VARCHAR"),
    ("pg_desc", "VARCHAR"),
    ("collective_seq_id", "BIGINT"),
    ("p2p_seq_id", "BIGINT"),
    ("op_id", "BIGINT"),
    ("is_p2p", "BOOLEAN"),
    ("profiling_name", "VARCHAR"),         # as recorded: 'gloo:all_reduce', 'nccl:send 0->1'
    ("backend", "VARCHAR"),                # before the colon
    ("op", "VARCHAR"),                     # after it, without the peer part
    ("peer", "VARCHAR"),                   # send/recv: '0->1', '1<-0'
    ("input_sizes", "VARCHAR"),            # JSON list of shapes
    ("input_dtypes", "VARCHAR"),           # JSON list of dtype names
    ("output_sizes", "VARCHAR"),
    ("output_dtypes", "VARCHAR"),
    ("input_numel", "BIGINT"),             # elements over all input tensors
    ("output_numel", "BIGINT"),
    ("state", "VARCHAR"),                  # scheduled | started | completed
    ("retired", "BOOLEAN"),
    ("time_created_ns", "BIGINT"),
    ("time_discovered_started_ns", "BIGINT"),
    ("time_discovered_completed_ns", "BIGINT"),
    ("duration_ms", "DOUBLE"),
    ("timeout_ms", "BIGINT"),
    ("thread_id", "VARCHAR"),
    ("thread_name", "VARCHAR"),
    ("frames", "VARCHAR"),                 # JSON list of {name, filename, line}, innermost first
)

STACK_COLUMNS: tuple[tuple[str, str], ...] = (
    ("capture_id", "VARCHAR NOT NULL"),
    ("rank", "INTEGER NOT NULL"),
    ("pid", "BIGINT"),
    ("thread_id", "VARCHAR"),              # pthread id (matches hang_fr_entries.thread_id)
    ("os_thread_id", "BIGINT"),
    ("thread_name", "VARCHAR"),
    ("active", "BOOLEAN"),
    ("owns_gil", "BOOLEAN"),
    ("depth", "INTEGER NOT NULL"),         # 0 = innermost frame
    ("function", "VARCHAR"),
    ("filename", "VARCHAR"),
    ("line", "INTEGER"),
    ("module", "VARCHAR"),
)

HANG_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "hang_captures": CAPTURE_COLUMNS, "hang_ranks": RANK_COLUMNS,
    "hang_pg_config": PG_CONFIG_COLUMNS, "hang_pg_status": PG_STATUS_COLUMNS,
    "hang_fr_entries": FR_ENTRY_COLUMNS, "hang_stacks": STACK_COLUMNS,
}

HANG_DDL: tuple[str, ...] = tuple(
    f"CREATE TABLE {name} (" + ", ".join(f"{c} {t}" for c, t in cols) + ")"
    for name, cols in HANG_COLUMNS.items()
)
