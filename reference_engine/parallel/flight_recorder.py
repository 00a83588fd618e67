"""Dumps in PyTorch Flight Recorder's pickle format: `DIR/rank_<R>`, one file per rank.

The dict has Flight Recorder's keys: `version`, `pg_config` ({name: {name, desc, ranks}}),
`pg_status` ({pg_id: {last_enqueued_collective, last_started_collective,
last_completed_collective}}), `entries` and `comm_lib_version`.

Where torch's own recorder is on (TORCH_FR_BUFFER_SIZE > 0 before the group starts; it
records gloo in torch 2.13), its entries are the dump's entries, exactly as torch recorded
them (record ids, thread ids, sizes), and this engine's log only fills in what torch leaves
empty on gloo: the state past "scheduled", the discovered start and completion times and the
duration, and the Python frames (torch's own stack capture, symbolised, took 3-4 s per dump
on a busy 2-core host; ours are taken when the collective is issued). That overlay is made only if both logs agree, sequence id
by sequence id, on the op and sizes; otherwise, or with the recorder off, the entries are
this engine's own log (collective_log.py), in the same fields.

A dump holds only dicts, lists, tuples, str, int, float, bool and None, so a reader can
unpickle it with a restricted unpickler that refuses anything else.
"""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

from reference_engine.parallel.collective_log import SCHEDULED, CollectiveLog

log = logging.getLogger("reference_engine.parallel")
VERSION = "2.10"  # the format version torch 2.13's recorder writes
_PLAIN = (str, int, float, bool, type(None))
_OVERLAID = ("state", "time_discovered_started_ns", "time_discovered_completed_ns",
             "duration_ms", "retired")
_DUMP_STACKS = False  # see the module docstring: frames come from the collective log


def dump_path(dump_dir: str | os.PathLike[str], rank: int) -> Path:
    return Path(dump_dir) / f"rank_{rank}"


def torch_trace() -> dict[str, Any] | None:
    """torch's own recorder dump of this process, or None where it is unavailable."""
    try:
        from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined]  # private: in torch's extension, not in its stub
        return pickle.loads(_dump_fr_trace(True, _DUMP_STACKS, False))
    except Exception as exc:  # no recorder in this build, or it refused: use our own log
        log.debug("torch flight recorder unavailable: %s", exc)
        return None


def _own_entries_of_torch(trace: dict[str, Any] | None, own: CollectiveLog) -> list[dict[str, Any]]:
    """torch's entries for this log's process group, recorded since it started."""
    if not trace:
        return []
    return [e for e in trace.get("entries", [])
            if tuple(e.get("process_group", ())) == (own.pg_name, own.pg_desc)
            and e.get("time_created_ns", 0) >= own.started_ns]


def _agree(torch_entry: dict[str, Any], mine: dict[str, Any]) -> bool:
    return all(torch_entry.get(k) == mine.get(k) for k in
               ("profiling_name", "input_sizes", "input_dtypes", "output_sizes"))


def build_dump(own: CollectiveLog, trace: dict[str, Any] | None) -> dict[str, Any]:
    """The Flight Recorder dict for this rank (see the module docstring for the sources)."""
    mine = own.entries()
    entries: list[dict[str, Any]] = mine
    theirs = _own_entries_of_torch(trace, own)
    if theirs:
        by_seq = {e["collective_seq_id"]: e for e in mine}
        if all(e["collective_seq_id"] in by_seq and _agree(e, by_seq[e["collective_seq_id"]])
               for e in theirs):
            entries = []
            for e in theirs:
                m = by_seq[e["collective_seq_id"]]
                merged = dict(e)
                merged.setdefault("frames", m["frames"])
                if merged.get("state") == SCHEDULED and m["state"] != SCHEDULED:
                    merged.update({k: m[k] for k in _OVERLAID if k in m})
                    # Our "started" is stamped just before the call, torch's "created" inside
                    # it: a start never precedes its creation.
                    merged["time_discovered_started_ns"] = max(
                        merged["time_discovered_started_ns"], merged.get("time_created_ns", 0))
                entries.append(merged)
            # Our ring may reach past torch's (a smaller TORCH_FR_BUFFER_SIZE): keep the rest.
            seen = {e["collective_seq_id"] for e in theirs}
            entries += [m for m in mine if m["collective_seq_id"] not in seen
                        and m["collective_seq_id"] > max(seen)]
        else:
            log.warning("torch's flight recorder and the collective log disagree; dumping the "
                        "collective log alone")
    return {
        "version": VERSION, "pg_config": own.pg_config(), "pg_status": own.pg_status(),
        "comm_lib_version": (trace or {}).get("comm_lib_version", ""),
        "entries": [_plain(e) for e in entries],
    }


def _plain(value: Any) -> Any:
    """A copy holding only plain types; anything else is a bug in what we recorded."""
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, _PLAIN):
        return value
    raise TypeError(f"flight recorder dump: {type(value).__name__} is not a plain type")


def write_dump(dump: dict[str, Any], path: Path) -> None:
    """Write atomically: a reader never sees half a dump."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(_plain(dump), protocol=4))
    os.replace(tmp, path)

