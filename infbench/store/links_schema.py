"""Schema version 9: collective and point-to-point link measurements (`link_probes`, `collectives`).

Kept apart from `schema.py` so that file stays readable; `schema.MIGRATIONS` appends this
migration. Written by `probes.links` (`infbench probe links`, which measures the links of N
local ranks with torch.distributed, and `infbench probe import-nccl-tests`, which reads the
text that nccl-tests' `*_perf` binaries print); `docs/store.md` says what every column means.

One probe is one measurement session or one imported file: a row in ``link_probes``, keyed by
``probe_id`` and linked to a run (``run_id``) when the user asked for it, as traces are.
``collectives`` holds one row per measurement: an op at one message size on one group of
ranks, once per repeat (a probe repeats each measurement and keeps every repeat, so a reader
can take medians in SQL), or one line of an nccl-tests table per in-/out-of-place half.
Sizes, algbw and busbw follow nccl-tests' definitions exactly, so imported rows and measured
rows compare: ``bytes`` is nccl-tests' ``size`` column, ``algbw_gbps = bytes / time``
(GB/s, 1e9 bytes), ``busbw_gbps = algbw_gbps * factor(op, ranks)``.
"""

from __future__ import annotations

LINKS_MIGRATION_DESCRIPTION = (
    "link_probes and collectives: collective and point-to-point link measurements "
    "(infbench probe links, imported nccl-tests output) with nccl-tests' algbw and busbw"
)

LINK_TABLES: tuple[str, ...] = ("link_probes", "collectives")

# (name, DuckDB type); the single source of truth for the DDL and the writer's Arrow schema.
COLLECTIVE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("probe_id", "VARCHAR NOT NULL"),
    ("phase", "VARCHAR NOT NULL"),     # sweep | pairwise | bisect | import
    ("op", "VARCHAR NOT NULL"),        # all_reduce | all_gather | reduce_scatter | alltoall | broadcast | sendrecv ...
    ("bytes", "BIGINT NOT NULL"),      # nccl-tests' `size` (B)
    ("count", "BIGINT"),               # elements, as nccl-tests counts them
    ("dtype", "VARCHAR"),
    ("redop", "VARCHAR"),
    ("root", "INTEGER"),
    ("ranks", "INTEGER"),              # ranks taking part (the n of busbw's factor); NULL: unknown
    ("group_ranks", "VARCHAR"),        # which ranks, '0,1,2,3' (NULL when the source does not say)
    ("src_rank", "INTEGER"),           # pairwise send/recv: the pair
    ("dst_rank", "INTEGER"),
    ("in_place", "BOOLEAN NOT NULL"),
    ("repeat", "INTEGER NOT NULL"),
    ("step", "INTEGER"),               # bisect: which comparison (groups of one step are paired by repeat)
    ("iters", "INTEGER"),
    ("time_us", "DOUBLE NOT NULL"),
    ("algbw_gbps", "DOUBLE"),
    ("busbw_gbps", "DOUBLE"),
    ("wrong", "BIGINT"),               # nccl-tests' #wrong
    ("error", "DOUBLE"),               # old nccl-tests / rccl-tests' max error column
)

LINKS_DDL: tuple[str, ...] = (
    "CREATE TABLE link_probes (probe_id VARCHAR PRIMARY KEY, run_id VARCHAR, "
    "created_at TIMESTAMP NOT NULL, source VARCHAR NOT NULL, path VARCHAR, backend VARCHAR, "
    "world_size INTEGER, hostname VARCHAR, config VARCHAR, verdict VARCHAR, notes VARCHAR)",
    "CREATE TABLE collectives ("
    + ", ".join(f"{n} {t}" for n, t in COLLECTIVE_COLUMNS) + ")",
)
