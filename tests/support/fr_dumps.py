"""Flight Recorder dumps built from a list of calls per rank, in PyTorch's format (NCCL style:
entries `completed` when done, pg_config keyed by the group's name), for tests and benchmarks."""

from __future__ import annotations

import pickle
from pathlib import Path

Call = tuple[str, list[int], str]   # (op, shape, dtype)


def dump_bytes(rank: int, world: int, ops: list[Call], done: int, created_ns: int,
               first_seq: int = 1) -> bytes:
    """Rank `rank`'s dump: `ops` as collectives first_seq, first_seq + 1, ...; the first
    `done` of them completed, the rest started; the last created at `created_ns`."""
    entries = []
    for i, (op, size, dt) in enumerate(ops):
        seq = first_seq + i
        entries.append({
            "record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"),
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": f"nccl:{op}", "time_created_ns": created_ns - (len(ops) - i) * 1000,
            "input_sizes": [size], "input_dtypes": [dt],
            "output_sizes": [[world * size[0], *size[1:]]] if op == "all_gather" else [size],
            "output_dtypes": [dt], "state": "completed" if i < done else "started",
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": i < done, "timeout_ms": 600000, "is_p2p": False, "frames": [],
            "thread_id": f"{7000 + rank}", "thread_name": "step-loop"})
    last = first_seq + len(ops) - 1
    return pickle.dumps({"version": "2.10", "entries": entries,
                         "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                             "ranks": str(list(range(world)))}},
                         "pg_status": {"0": {"last_enqueued_collective": last,
                                             "last_started_collective": last,
                                             "last_completed_collective": first_seq + done - 1}}})


def write_dumps(folder: Path, world: int, per_rank: dict[int, tuple[list[Call], int]],
                created_ns: int, first_seq: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, (ops, done) in per_rank.items():
        (folder / f"rank_{r}").write_bytes(dump_bytes(r, world, ops, done, created_ns, first_seq))
    return folder
