"""What every reader hands the store writer: one imported run and its requests, typed.

A reader turns one tool's file into `ImportedRun`s and never touches the store, so each
tool's module is only about its format, and the writer (`writer.py`) is the one place that
decides how a tool's numbers land in `requests` and `chunks`.

Send and schedule times are integer ns on the tool's own clock (`send_ns`), relative to
nothing in particular (AIPerf's are Unix ns, which a float of seconds would round by up to
~200 ns); the writer moves them onto the run's time axis. Durations are seconds. A value the
file does not have is None.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload


class BadFile(Exception):
    """A file that cannot be imported as it is: one line naming the file, the record and the
    field (`infbench import --from` prints it and exits 2, storing nothing)."""

    def __init__(self, path: Path | str, record: str, field_name: str, problem: str) -> None:
        self.path, self.record, self.field_name, self.problem = str(path), record, field_name, problem
        super().__init__(f"{path}: {record}: {field_name}: {problem}")


@dataclass(frozen=True)
class ImportedRequest:
    """One request as the tool recorded it. `token_gaps_s` are the gaps between the events
    that carried output (after the first), in order, where the tool kept them: the writer
    rebuilds one chunk per event from them."""

    send_ns: int | None  # when the tool sent it, ns on the tool's clock
    ttft_s: float | None
    e2e_s: float | None  # send to the end the tool's e2e uses (see the tool's definitions)
    input_tokens: int | None
    output_tokens: int | None
    token_gaps_s: tuple[float, ...] | None = None
    scheduled_ns: int | None = None  # the intended send time, where the tool's file has one
    max_tokens: int | None = None  # the output length the tool asked for, where recorded
    stream_end_s: float | None = None  # send to the end of the stream, where the tool timed it
    error: str | None = None  # the tool's own error text; None for a good request


@dataclass
class ImportedRun:
    """One benchmark run read from a tool's file."""

    tool: str  # the `--from` name
    source: str  # the file (or directory) it came from
    record: str  # which record of the file: "benchmark 2", "whole file"
    tool_version: str | None
    command: str | None  # the command line, secrets removed, where the file has it
    tool_config: dict[str, Any]  # the settings the file records, secrets removed
    tool_summary: dict[str, Any]  # the tool's own aggregate numbers, in its units
    model: str | None
    target_url: str | None
    endpoint: str | None
    started_unix_s: float | None  # wall-clock start, where the file has it
    requests: list[ImportedRequest]
    notes: list[str] = field(default_factory=list)  # what the file lacks, said once each


def ns(seconds: float | None) -> int | None:
    """Seconds (a tool's float stamp) as integer ns."""
    return None if seconds is None else int(round(seconds * 1e9))


def file_text(path: Path) -> str:
    """The file's text; a directory or non-UTF-8 content is a BadFile."""
    if path.is_dir():
        raise BadFile(path, "whole file", "(path)", "a directory, where this tool's result file was expected")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadFile(path, "whole file", "encoding", f"not UTF-8 text ({exc.reason})") from None


def load_json(path: Path) -> Any:
    """A whole-file JSON document; a parse error names the line and column."""
    text = file_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadFile(path, f"line {exc.lineno}", f"column {exc.colno}",
                      f"not JSON ({exc.msg})") from None


def load_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, object) for every non-blank line of a JSON Lines file."""
    out = []
    lines = file_text(path).splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise BadFile(path, f"line {n}", f"column {exc.colno}", f"not JSON ({exc.msg})") from None
    return out


def object_at(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """`obj[key]` where it is a JSON object, else an empty one: for optional sections of a
    tool's summary that a file may lack or hold in another shape."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


class Fields:
    """Typed reads from one JSON object, each failure naming the file, record and field."""

    def __init__(self, path: Path | str, record: str, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise BadFile(path, record, "(record)", f"expected a JSON object, got {type(obj).__name__}")
        self.path, self.record, self.obj = path, record, obj

    def bad(self, name: str, problem: str) -> BadFile:
        return BadFile(self.path, self.record, name, problem)

    def _get(self, name: str, required: bool) -> Any:
        cur: Any = self.obj
        for part in name.split("."):
            if not isinstance(cur, dict) or part not in cur:
                if required:
                    raise self.bad(name, "missing")
                return None
            cur = cur[part]
        return cur

    @overload
    def number(self, name: str, *, required: Literal[True] = ..., minimum: float | None = ...) -> float: ...
    @overload
    def number(self, name: str, *, required: bool, minimum: float | None = ...) -> float | None: ...
    def number(self, name: str, *, required: bool = True, minimum: float | None = 0.0) -> float | None:
        v = self._get(name, required)
        if v is None and not required:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.bad(name, f"expected a finite number, got {v!r}")
        if minimum is not None and v < minimum:
            raise self.bad(name, f"{v!r} is below {minimum:g}")
        return float(v)

    @overload
    def integer(self, name: str, *, required: Literal[True] = ...) -> int: ...
    @overload
    def integer(self, name: str, *, required: bool) -> int | None: ...
    def integer(self, name: str, *, required: bool = True) -> int | None:
        v = self.number(name, required=required)
        if v is None:
            return None
        raw = self._get(name, required)
        if isinstance(raw, int):
            return raw  # exact: a float would round Unix ns by up to ~200 ns
        if not float(v).is_integer():
            raise self.bad(name, f"expected a whole number, got {v!r}")
        return int(v)

    @overload
    def text(self, name: str, *, required: Literal[True] = ...) -> str: ...
    @overload
    def text(self, name: str, *, required: bool) -> str | None: ...
    def text(self, name: str, *, required: bool = True) -> str | None:
        v = self._get(name, required)
        if v is None and not required:
            return None
        if not isinstance(v, str):
            raise self.bad(name, f"expected a string, got {type(v).__name__}")
        return v

    @overload
    def array(self, name: str, *, required: Literal[True] = ...) -> list[Any]: ...
    @overload
    def array(self, name: str, *, required: bool) -> list[Any] | None: ...
    def array(self, name: str, *, required: bool = True) -> list[Any] | None:
        v = self._get(name, required)
        if v is None and not required:
            return None
        if not isinstance(v, list):
            raise self.bad(name, f"expected a list, got {type(v).__name__}")
        return v

    @overload
    def mapping(self, name: str, *, required: Literal[True] = ...) -> dict[str, Any]: ...
    @overload
    def mapping(self, name: str, *, required: bool) -> dict[str, Any] | None: ...
    def mapping(self, name: str, *, required: bool = True) -> dict[str, Any] | None:
        v = self._get(name, required)
        if v is None and not required:
            return None
        if not isinstance(v, dict):
            raise self.bad(name, f"expected an object, got {type(v).__name__}")
        return v

    def raw(self, name: str) -> Any:
        return self._get(name, False)
