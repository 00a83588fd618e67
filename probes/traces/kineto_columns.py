"""A Kineto (PyTorch profiler) file read into memory as numpy columns, without a store.

`TraceFrame` (probes.traces.frame) analyses a trace file the way HTA does, in one process and
no DuckDB file; this module gives it, per rank file, the complete events (`ph: X` with a
category, a start and a duration) as columns, converted exactly as the store import converts
them (`kineto._STAGE`), so both paths compute the same numbers:

- numbers written as 7, 7.0 or "7" are the same number; a value that is not a number is
  missing (the import's TRY_CAST), and a missing stream or correlation is -1, which every
  analysis treats as missing;
- `ts` becomes integer nanoseconds exactly, from the literal's own text (msgspec.Raw; see
  kineto_literals: a double of an epoch-microsecond ts is a quarter microsecond coarse);
  `dur`, small, through a double, whose spacing is under a nanosecond below 2**43 us.

Two readers, chosen by the file's decompressed size: msgspec, fastest for the traces one
person captures (a few MB to tens of MB; DuckDB's connection alone costs more than parsing
a 300 KB trace), and DuckDB's streaming JSON reader past `LARGE_BYTES`, where a Python
object per event would take gigabytes. msgspec decodes each event into a struct of the six
fields the timeline reads and skips the rest of it (a CPU op's argument lists are most of a
trace's bytes) without making objects for them; a file of another shape (an event or its
`args` not an object) is read again with the standard library's parser, slower but general.
"""

from __future__ import annotations

import gc
import gzip
import json
import struct
import tempfile
import zlib
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from probes.traces.errors import TraceError
from probes.traces.kineto_literals import literals_ns

LARGE_BYTES = 48 << 20      # decompressed JSON past which DuckDB's reader is used


@dataclass
class RankEvents:
    """One rank file's complete events, in file order. Owns its arrays.

    event_id is the event's index in `traceEvents` (the store's event_id); correlation and
    stream are -1 where the file has none."""

    rank: int
    round_to_us: bool           # some timestamp has sub-microsecond digits (HTA rounds then)
    event_id: np.ndarray        # int64
    cat: np.ndarray             # object (str)
    name: np.ndarray            # object (str or None)
    start_ns: np.ndarray        # int64
    end_ns: np.ndarray          # int64
    correlation: np.ndarray     # int64
    stream: np.ndarray          # int64
    metadata: dict[str, Any] = field(default_factory=dict)


def read_rank(path: Path, rank_hint: int | None) -> RankEvents:
    """The complete events of the Kineto file at `path`; rank from the file's
    distributedInfo, else `rank_hint`, else 0."""
    size = _decompressed_size(path)
    if size > LARGE_BYTES:
        cols, meta = _read_with_duckdb(path)
    else:
        # Tens of thousands of events and their column lists are allocated and dropped
        # here, none of them in a cycle: a collection pass mid-read only walks them (a
        # third of the decode's time), so the collector waits until the read is done.
        enabled = gc.isenabled()
        gc.disable()
        try:
            cols, meta = _read_in_python(path)
        finally:
            if enabled:
                gc.enable()
    dist = found if isinstance(found := meta.get("distributedInfo"), dict) else {}
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) else rank_hint
    return RankEvents(rank=int(rank or 0), metadata=meta, **cols)


def _decompressed_size(path: Path) -> int:
    try:
        with path.open("rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return path.stat().st_size
            f.seek(-4, 2)
            # gzip's trailer: the input's size modulo 2**32; a file larger than that is
            # far past the threshold anyway, so the compressed size bounds it from below.
            return max(struct.unpack("<I", f.read(4))[0], path.stat().st_size)
    except OSError as exc:
        raise TraceError(f"cannot read it ({exc.strerror or exc})") from None


def _raw(path: Path) -> bytes:
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"corrupt or truncated gzip ({exc})") from None
    except OSError as exc:
        raise TraceError(f"cannot read it ({exc.strerror or exc})") from None


def _events_and_meta(doc: Any) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(doc, list):  # Chrome's "JSON Array Format": events only
        return doc, {}
    if not isinstance(doc, dict):
        raise TraceError("not a JSON trace (it does not start with '{' or '[')")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise TraceError("no traceEvents array (not a PyTorch profiler / Chrome trace)")
    return events, {k: v for k, v in doc.items() if k != "traceEvents"}


def _floats(values: list[Any]) -> np.ndarray:
    """float64 of each value: numbers and numeric text as numbers, the rest NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_float(v) for v in values], dtype=np.float64)


def _float(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return np.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


def _ids(values: list[Any]) -> np.ndarray:
    """int64 ids (streams, correlations) as the import's TRY_CAST(... AS DOUBLE AS BIGINT)
    reads them: rounded, -1 where missing or not a number."""
    x = _floats(values)
    ok = np.isfinite(x) & (np.abs(x) < 2.0 ** 62)
    return np.where(ok, np.rint(np.where(ok, x, 0)), -1).astype(np.int64)


def _ns(x: np.ndarray) -> np.ndarray:
    """Microseconds (finite floats, under 2**43) to integer nanoseconds, exactly."""
    whole = np.floor(x)
    return whole.astype(np.int64) * 1000 + np.rint((x - whole) * 1000).astype(np.int64)


class _Args(msgspec.Struct, gc=False):
    correlation: Any = None
    stream: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    # text as Kineto writes it; a number or object here fails the decode and the file is
    # read again by the general parser, which turns it into its JSON text as the import does
    cat: str | None = None
    name: str | None = None
    ts: msgspec.Raw = msgspec.Raw()  # the literal's text: a double would lose nanoseconds
    dur: Any = None
    args: _Args | None = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event]  # noqa: N815 - the file's own key
    schemaVersion: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815


_DECODE = msgspec.json.Decoder(_Trace | list[_Event]).decode
_PH, _TS, _CAT, _NAME, _DUR, _ARGS = (attrgetter(f) for f in ("ph", "ts", "cat", "name", "dur", "args"))
_CORR, _STREAM = attrgetter("correlation"), attrgetter("stream")
_NO_ARGS = _Args()

# What the timeline reads from a file: every event's ts literal, then the index, cat, name,
# dur, correlation and stream of each `ph: X` event, as lists.
_Fields = tuple[list[Any], list[int], list[Any], list[Any], list[Any], list[Any], list[Any]]


def _fields_from_structs(doc: _Trace | list[_Event]) -> tuple[_Fields, dict[str, Any]]:
    if isinstance(doc, list):
        events, meta = doc, {}
    else:
        events = doc.traceEvents
        meta = {k: v for k, v in msgspec.structs.asdict(doc).items()
                if k != "traceEvents" and v is not None}
    # one pass per column, each a C-level map where it can be: faster than a tuple per event
    # turned into columns, and the ts literals stay msgspec's Raw views (no bytes copies)
    idx = [i for i, ph in enumerate(map(_PH, events)) if ph == "X"]
    xs = list(map(events.__getitem__, idx))
    args = [a if a is not None else _NO_ARGS for a in map(_ARGS, xs)]
    return (list(map(_TS, events)), idx, list(map(_CAT, xs)), list(map(_NAME, xs)),
            list(map(_DUR, xs)), list(map(_CORR, args)), list(map(_STREAM, args))), meta


def _literal(v: Any) -> bytes:
    # a value of the standard library's parse (floats kept as their text) as its literal
    return b"" if v is None or isinstance(v, bool) else str(v).encode()


def _fields_from_dicts(doc: Any) -> tuple[_Fields, dict[str, Any]]:
    events, meta = _events_and_meta(doc)
    ev = [e if isinstance(e, dict) else {} for e in events]
    idx = [i for i, e in enumerate(ev) if e.get("ph") == "X"]
    xs = [ev[i] for i in idx]
    args = [found if isinstance(found := e.get("args"), dict) else {} for e in xs]
    return ([_literal(e.get("ts")) for e in ev], idx, _texts([e.get("cat") for e in xs]),
            _texts([e.get("name") for e in xs]), [e.get("dur") for e in xs],
            [a.get("correlation") for a in args], [a.get("stream") for a in args]), meta


def _read_in_python(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = _raw(path)
    try:
        fields, meta = _fields_from_structs(_DECODE(raw))
    except msgspec.ValidationError:
        try:
            doc = json.loads(raw, parse_float=str)
        except ValueError as exc:
            raise TraceError(f"malformed JSON ({exc})") from None
        fields, meta = _fields_from_dicts(doc)
    except msgspec.DecodeError as exc:
        raise TraceError(f"malformed JSON ({exc})") from None
    ts_lit, ids, cat, name, dur_v, corr, stream = fields
    start_all, has_ts = literals_ns(ts_lit)
    round_to_us = bool((start_all[has_ts] % 1000 != 0).any())
    if not ids:
        return _no_events(round_to_us), meta
    idx = np.array(ids, dtype=np.int64)
    dur = _floats(dur_v)
    cats = _strings(cat)
    # Complete events: `ph: X` with a category, a start and a duration.
    ok = has_ts[idx] & np.isfinite(dur) & np.not_equal(cats, None)  # type: ignore[call-overload]  # numpy's stubs take no None; an object array compares with it element by element
    start = start_all[idx]
    cols = {
        "event_id": idx, "cat": cats, "name": _strings(name), "start_ns": start,
        "end_ns": start + _ns(np.where(np.isfinite(dur), dur, 0)),
        "correlation": _ids(corr), "stream": _ids(stream),
    }
    if not ok.all():
        cols = {k: v[ok] for k, v in cols.items()}
    return {"round_to_us": round_to_us, **cols}, meta


def _no_events(round_to_us: bool) -> dict[str, Any]:
    z = np.zeros(0, dtype=np.int64)
    return {"round_to_us": round_to_us, "event_id": z, "cat": np.empty(0, dtype=object),
            "name": np.empty(0, dtype=object), "start_ns": z, "end_ns": z, "correlation": z,
            "stream": z}


def _texts(values: list[Any]) -> list[str | None]:
    # Text columns as the import reads them: a JSON string as is, other values as their
    # JSON text (DuckDB's VARCHAR of a number), missing as None. (msgspec's decode already
    # refuses anything but a string or null there.)
    return [v if v.__class__ is str or v is None else json.dumps(v) for v in values]


def _strings(values: list[str | None]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _read_with_duckdb(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    import duckdb

    from probes.traces import kineto

    con = duckdb.connect(":memory:")
    try:
        with tempfile.TemporaryDirectory(prefix="infbench-trace-") as tmp:
            meta = kineto.stage(con, path, Path(tmp), "_events")
        round_to_us = bool(con.execute(
            "SELECT coalesce(bool_or(start_ns % 1000 <> 0), false) FROM _events").fetchall()[0][0])
        cols = con.execute(
            "SELECT event_id, cat, name, start_ns, start_ns + dur_ns AS end_ns, "
            "coalesce(correlation, -1) AS correlation, coalesce(stream, -1) AS stream "
            "FROM _events WHERE ph = 'X' AND cat IS NOT NULL AND start_ns IS NOT NULL "
            "AND dur_ns IS NOT NULL ORDER BY event_id").fetchnumpy()
    finally:
        con.close()
    out: dict[str, Any] = {"round_to_us": round_to_us}
    for k, v in cols.items():
        if k in ("cat", "name"):
            arr = np.empty(len(v), dtype=object)
            arr[:] = np.ma.getdata(v)
            if np.ma.is_masked(v):
                arr[np.ma.getmaskarray(v)] = None
            out[k] = arr
        else:
            out[k] = np.asarray(np.ma.getdata(v), dtype=np.int64)
    return out, meta
