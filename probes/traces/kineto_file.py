"""Cut a Kineto (PyTorch profiler) trace file into its event array and its metadata.

A Kineto trace is one JSON object: a few metadata keys, then `"traceEvents": [...]` holding
every event, then maybe more keys (`traceName`, `baseTimeNanoseconds`, an `INFO` list). DuckDB
parses a top-level JSON *array* in parallel, streaming, at hundreds of MB/s, but a single
huge object only in one thread and in memory (measured: a 1M-event object took minutes). So
the events array is copied, as bytes, into a file of its own (gzip decompressed on the way)
and the metadata is parsed from what is left: the bytes before the array and after it.

Finding where the array ends without parsing it: only at the array's own closing bracket is
the rest of the file a valid continuation of the top-level object (`, "key": value ... }`
then end of file); any bracket inside an event is followed by more of the array. The
earliest such bracket in the file's tail closes `traceEvents`.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from probes.traces.errors import TraceError

_CHUNK = 8 << 20
_HEAD_LIMIT = 64 << 20  # the array must start within this many bytes
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()
# A ts of 8e12 us or more with decimals: from 2**43 (8.8e12) on, a double's spacing is over
# a nanosecond and a literal's three decimals no longer survive it. Only then is the file
# rewritten (that costs ~12 ms per MB); traces on Kineto's relative clock stay below.
_LONG_TS = re.compile(rb'"ts"\s*:\s*-?(?:\d{14,}|[89]\d{12})\.\d')
_TS_NUMBER = re.compile(rb'("ts"\s*:\s*)(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)')


@dataclass(frozen=True)
class KinetoFile:
    events_path: Path          # a JSON array holding the trace's events, nothing else
    metadata: dict[str, Any]   # every top-level key but traceEvents


def _open(path: Path) -> BinaryIO:
    with path.open("rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else path.open("rb")  # type: ignore[return-value]  # GzipFile reads as a BinaryIO


def _rest_is_object_tail(text: str, i: int) -> bool:
    """Is text[i:] `(, "key": value)* }` and then only whitespace?"""
    n = len(text)
    while True:
        i = _WS.match(text, i).end()  # type: ignore[union-attr]  # _WS matches the empty string: never None
        if i >= n:
            return False
        c = text[i]
        if c == "}":
            return _WS.match(text, i + 1).end() == n  # type: ignore[union-attr]  # _WS matches the empty string: never None
        if c != ",":
            return False
        i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]  # _WS matches the empty string: never None
        if i >= n or text[i] != '"':
            return False
        try:
            _, i = _DECODER.raw_decode(text, i)
            i = _WS.match(text, i).end()  # type: ignore[union-attr]  # _WS matches the empty string: never None
            if i >= n or text[i] != ":":
                return False
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]  # _WS matches the empty string: never None
            _, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return False


def _array_end(f: BinaryIO, size: int, thorough: bool = False) -> int:
    """Offset of the `]` that closes the events array in a file that starts with its `[`.

    Fast path: the last valid closing bracket that follows an object (events are objects; a
    metadata list of strings after the events, Kineto's INFO, ends otherwise). `thorough`
    takes the earliest valid one instead, for the rare file with a list of objects after
    its events (the fast guess then fails to parse and the caller asks again)."""
    window = 64 << 10
    while True:
        start = max(0, size - window)
        f.seek(start)
        # latin-1 keeps one character per byte, so offsets in the text are file offsets.
        text = f.read(size - start).decode("latin-1")
        found = None
        pos = len(text)
        while (pos := text.rfind("]", 0, pos)) >= 0:
            if _rest_is_object_tail(text, pos + 1):
                if not thorough and text[:pos].rstrip().endswith(("}", "[")):
                    return start + pos
                found = pos  # keep looking: the earliest valid one closes the events
        if found is not None and (start == 0 or text[:found].rstrip().endswith(("}", "["))):
            return start + found
        if start == 0:
            raise TraceError("the traceEvents array is not closed (truncated file?)")
        window *= 8


def _copy(src: BinaryIO, dst: BinaryIO, first: bytes) -> bool:
    """Write `first` and the rest of `src` to `dst`; whether a `ts` needs its literal kept."""
    dst.write(first)
    found = bool(_LONG_TS.search(first))
    tail = first[-64:]
    while chunk := src.read(_CHUNK):
        dst.write(chunk)
        if not found:
            found = bool(_LONG_TS.search(tail + chunk))
        tail = chunk[-64:]
    return found


def _quote_timestamps(path: Path) -> None:
    """Rewrite every `"ts": <number>` in the file as `"ts": "<number>"`, in chunks cut at a
    comma (no number spans one)."""
    tmp = path.with_name(path.name + ".quoted")
    with path.open("rb") as src, tmp.open("wb") as dst:
        carry = b""
        while chunk := src.read(_CHUNK):
            buf = carry + chunk
            cut = buf.rfind(b",")
            if cut < 0:
                carry = buf
                continue
            dst.write(_TS_NUMBER.sub(rb'\1"\2"', buf[:cut]))
            carry = buf[cut:]
        dst.write(_TS_NUMBER.sub(rb'\1"\2"', carry))
    tmp.replace(path)


def extract(path: Path, tmpdir: Path, thorough: bool = False) -> KinetoFile:
    """Write the events of the Kineto trace at `path` to a file in `tmpdir`; parse the rest."""
    out = tmpdir / (path.name.replace(".gz", "") + ".events.json")
    try:
        with _open(path) as src, out.open("w+b") as dst:
            head = bytearray()
            while True:
                chunk = src.read(_CHUNK)
                head += chunk
                stripped = head.lstrip()
                if stripped[:1] == b"[":  # Chrome's "JSON Array Format": events only
                    quote = _copy(src, dst, bytes(stripped))
                    prefix, tail = None, b""
                    break
                if stripped[:1] not in (b"{", b""):
                    raise TraceError("not a JSON trace (it does not start with '{' or '[')")
                m = _KEY.search(head)
                if m:
                    prefix = bytes(head[: m.start()])
                    quote = _copy(src, dst, bytes(head[m.end() - 1:]))
                    break
                if not chunk or len(head) > _HEAD_LIMIT:
                    raise TraceError("no traceEvents array (not a PyTorch profiler / Chrome trace)")
            del head
            if prefix is not None:
                size = dst.tell()
                end = _array_end(dst, size, thorough)
                dst.seek(end + 1)
                tail = dst.read()
                dst.truncate(end + 1)
        if quote:
            _quote_timestamps(out)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"corrupt or truncated gzip ({exc})") from None
    except OSError as exc:
        raise TraceError(f"cannot read it ({exc.strerror or exc})") from None
    if prefix is None:
        return KinetoFile(out, {})
    try:
        metadata = json.loads(prefix + b'"traceEvents": []' + tail)
    except ValueError as exc:
        raise TraceError(f"malformed metadata around the events ({exc})") from None
    if not isinstance(metadata, dict):
        raise TraceError("not a JSON trace object")
    metadata.pop("traceEvents", None)
    return KinetoFile(out, metadata)
