"""Reading a Flight Recorder dump safely.

A dump is a pickle (`torch._C._distributed_c10d._dump_fr_trace()`, or the file a rank writes
on a watchdog timeout). Unpickling runs whatever callable the file names, so a dump from an
incident ticket is untrusted input. A real dump holds only plain data: dicts, lists, tuples,
strings, numbers, booleans and None (PyTorch 2.13 writes it with no GLOBAL opcode at all).
`_PlainUnpickler` therefore refuses every global and every persistent id: a file that asks
for `os.system` (via `__reduce__`) is refused before anything runs, with one line naming
what it asked for.

The entry fields follow torch/csrc/distributed/c10d/FlightRecorder (record_id, pg_id,
process_group, collective_seq_id, p2p_seq_id, op_id, profiling_name, time_created_ns,
input/output sizes and dtypes, state, time_discovered_*_ns, retired, timeout_ms, is_p2p,
frames; newer dumps add thread_id/thread_name, timing adds duration_ms).
"""

from __future__ import annotations

import io
import math
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.hang.errors import CaptureError, DumpRefused

# A dump of 2000 entries with stacks is a few MB; anything far larger is not one.
MAX_DUMP_BYTES = 512 * 1024 * 1024
STATES = ("scheduled", "started", "completed")


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise DumpRefused(f"the pickle asks for {module}.{name}; a Flight Recorder dump holds "
                          "only plain data, so it was refused and nothing in it was run")

    def persistent_load(self, pid: Any) -> Any:
        raise DumpRefused("the pickle uses a persistent id; a Flight Recorder dump holds only "
                          "plain data, so it was refused and nothing in it was run")


@dataclass
class FrEntry:
    record_id: int
    pg_id: int | None
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int | None
    op_id: int | None
    is_p2p: bool
    profiling_name: str
    backend: str
    op: str
    peer: str | None
    input_sizes: list[list[int]]
    input_dtypes: list[str]
    output_sizes: list[list[int]]
    output_dtypes: list[str]
    state: str
    retired: bool | None
    time_created_ns: int | None
    time_discovered_started_ns: int | None
    time_discovered_completed_ns: int | None
    duration_ms: float | None
    timeout_ms: int | None
    thread_id: str | None
    thread_name: str | None
    frames: list[dict[str, Any]]

    @property
    def input_numel(self) -> int:
        return sum(math.prod(s) for s in self.input_sizes)

    @property
    def output_numel(self) -> int:
        return sum(math.prod(s) for s in self.output_sizes)


@dataclass
class FrDump:
    path: str
    version: str
    pg_config: dict[str, dict[str, Any]]      # key -> {name, desc, ranks: list[int]}
    pg_status: dict[str, dict[str, int]]      # key -> {last_enqueued, last_started, last_completed}
    entries: list[FrEntry] = field(default_factory=list)


def _fail(where: str, what: str) -> CaptureError:
    return CaptureError(f"{where}: not a Flight Recorder dump: {what}")


def _int(v: Any, where: str, key: str, required: bool = True) -> int | None:
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(where, f"{key} is {type(v).__name__}, not an integer")
    return v


def _str(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise _fail(where, f"{key} is {type(v).__name__}, not a string")
    return v


def _sizes(v: Any, where: str, key: str) -> list[list[int]]:
    # Exact types on purpose (bool is not a dimension); loops, not generators: a capture of
    # 256 ranks holds half a million of these.
    if type(v) in (list, tuple):
        out = []
        for s in v:
            if type(s) not in (list, tuple):
                break
            for d in s:
                if type(d) is not int:
                    break
            else:
                out.append(list(s))
                continue
            break
        else:
            return out
    raise _fail(where, f"{key} is not a list of shapes")


def _dtypes(v: Any, where: str, key: str) -> list[str]:
    if type(v) in (list, tuple):
        for d in v:
            if type(d) is not str:
                break
        else:
            return list(v)
    raise _fail(where, f"{key} is not a list of dtype names")


def _ranks(v: Any) -> list[int] | None:
    """pg_config's ranks: a list, or its repr ('[0, 1]') as PyTorch writes it. Parsed by
    hand: the analyzer evals it, which would run a string from the file."""
    if isinstance(v, list | tuple) and all(isinstance(r, int) for r in v):
        return list(v)
    if isinstance(v, str):
        body = v.strip().strip("[]()").strip()
        if not body:
            return []
        try:
            return [int(x) for x in body.replace(" ", "").rstrip(",").split(",")]
        except ValueError:
            return None
    return None


def _entry(e: Any, where: str) -> FrEntry:
    if not isinstance(e, dict):
        raise _fail(where, f"an entry is {type(e).__name__}, not a dict")
    for key in ("record_id", "collective_seq_id", "profiling_name", "state", "process_group",
                "input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
        if key not in e:
            raise _fail(where, f"an entry has no {key}")
    pg = e["process_group"]
    if not isinstance(pg, list | tuple) or len(pg) != 2 or not all(isinstance(x, str) for x in pg):
        raise _fail(where, "process_group is not a (name, desc) pair")
    name = _str(e["profiling_name"], where, "profiling_name")
    backend, _, rest = name.partition(":")
    op, _, peer = rest.partition(" ")
    state = _str(e["state"], where, "state")
    if state not in STATES:
        raise _fail(where, f"state {state!r} is not one of {', '.join(STATES)}")
    frames = e.get("frames") or []
    if not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames):
        raise _fail(where, "frames is not a list of dicts")
    dur = e.get("duration_ms")
    return FrEntry(
        record_id=_int(e["record_id"], where, "record_id"),  # type: ignore[arg-type]  # required: never None
        pg_id=_int(e.get("pg_id"), where, "pg_id", required=False),
        pg_name=pg[0], pg_desc=pg[1],
        collective_seq_id=_int(e["collective_seq_id"], where, "collective_seq_id"),  # type: ignore[arg-type]  # required: never None
        p2p_seq_id=_int(e.get("p2p_seq_id"), where, "p2p_seq_id", required=False),
        op_id=_int(e.get("op_id"), where, "op_id", required=False),
        is_p2p=bool(e.get("is_p2p", op in ("send", "recv"))),
        profiling_name=name, backend=backend if rest else "", op=op if rest else backend,
        peer=peer or None,
        input_sizes=_sizes(e["input_sizes"], where, "input_sizes"),
        input_dtypes=_dtypes(e["input_dtypes"], where, "input_dtypes"),
        output_sizes=_sizes(e["output_sizes"], where, "output_sizes"),
        output_dtypes=_dtypes(e["output_dtypes"], where, "output_dtypes"),
        state=state, retired=e.get("retired") if isinstance(e.get("retired"), bool) else None,
        time_created_ns=_int(e.get("time_created_ns"), where, "time_created_ns", required=False),
        time_discovered_started_ns=_int(e.get("time_discovered_started_ns"), where,
                                        "time_discovered_started_ns", required=False),
        time_discovered_completed_ns=_int(e.get("time_discovered_completed_ns"), where,
                                          "time_discovered_completed_ns", required=False),
        duration_ms=float(dur) if isinstance(dur, int | float) and not isinstance(dur, bool) else None,
        timeout_ms=_int(e.get("timeout_ms"), where, "timeout_ms", required=False),
        thread_id=str(e["thread_id"]) if e.get("thread_id") is not None else None,
        thread_name=str(e["thread_name"]) if e.get("thread_name") is not None else None,
        frames=[{"name": str(f.get("name")), "filename": str(f.get("filename")),
                 "line": f.get("line") if isinstance(f.get("line"), int) else None}
                for f in frames],
    )


def parse_dump(data: bytes, where: str) -> FrDump:
    """The dump in `data` (`where` names it in errors). Raises DumpRefused for a pickle that
    asks to run code, CaptureError for anything else that is not a dump."""
    if not data:
        raise _fail(where, "the file is empty")
    try:
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except DumpRefused as exc:
        raise DumpRefused(f"{where}: refused: {exc}") from None
    except EOFError:
        raise _fail(where, "the pickle is truncated") from None
    except (pickle.UnpicklingError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, OverflowError, MemoryError, UnicodeDecodeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise _fail(where, f"unreadable pickle ({first})") from None
    if not isinstance(obj, dict):
        raise _fail(where, f"the pickle holds a {type(obj).__name__}, not a dict")
    if "entries" not in obj or not isinstance(obj["entries"], list):
        raise _fail(where, "it has no list of entries")
    pg_config: dict[str, dict[str, Any]] = {}
    for key, cfg in (obj.get("pg_config") or {}).items():
        if isinstance(cfg, dict):
            pg_config[str(key)] = {"name": str(cfg.get("name", key)), "desc": str(cfg.get("desc", "")),
                                   "ranks": _ranks(cfg.get("ranks"))}
    pg_status: dict[str, dict[str, int]] = {}
    for key, st in (obj.get("pg_status") or {}).items():
        if isinstance(st, dict):
            pg_status[str(key)] = {
                k: v for k in ("last_enqueued_collective", "last_started_collective",
                               "last_completed_collective")
                if isinstance(v := st.get(k), int) and not isinstance(v, bool)}
    entries = [_entry(e, where) for e in obj["entries"]]
    entries.sort(key=lambda e: e.record_id)
    return FrDump(path=where, version=str(obj.get("version", "")), pg_config=pg_config,
                  pg_status=pg_status, entries=entries)


def read_dump(path: Path) -> FrDump:
    try:
        size = path.stat().st_size
        if size > MAX_DUMP_BYTES:
            raise _fail(str(path), f"{size} bytes is larger than any dump ({MAX_DUMP_BYTES})")
        data = path.read_bytes()
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return parse_dump(data, str(path))
