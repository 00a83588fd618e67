"""Trace replay: arrivals with lengths from a CSV or JSONL file, read as published.

Recognised columns (case-insensitive): a time (`timestamp`; Azure's `TIMESTAMP` as a date-time;
seconds otherwise, Mooncake's milliseconds), input tokens (`ContextTokens`, `input_tokens`,
`input_length`, `prompt_tokens`) and output tokens (`GeneratedTokens`, `output_tokens`,
`output_length`, `completion_tokens`). Mooncake's `hash_ids` (one id per 512-token block) are
honoured: blocks with the same id get the same text, so prefix sharing is replayed too.
Arrival offsets are relative to the first row of the slice, times `time_scale`.

The whole file is read and checked before the run (`Trace.load`). A row that cannot be sent
as written is an error naming the file, the row and the field: a missing column or value, a
time or length that is not a number, a negative length, hash_ids that are not a list of
integers. Rows that can be sent after a change are counted (`FileReport`) and warned about:
rows out of time order are sent in timestamp order; a row with 0 input tokens is skipped (a
request needs a prompt); 0 output tokens are sent as max_tokens 1; a Mooncake row whose
hash_ids do not number ceil(input_length / 512) is sent with input_length tokens, ids beyond
them dropped and tokens beyond the ids' blocks fresh (unshared) text. An empty file, a header
without rows, or a slice with no rows is an error.
"""

from __future__ import annotations

import csv
import json
import math
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.base import RequestSpec, Session, single
from infbench.loadgen.workloads.file_report import FileReport
from infbench.loadgen.workloads.prompts import TokenModel

TIME_KEYS = ("timestamp", "time", "arrival_time")
INPUT_KEYS = ("contexttokens", "input_tokens", "input_length", "prompt_tokens")
OUTPUT_KEYS = ("generatedtokens", "output_tokens", "output_length", "completion_tokens")
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceRow:
    t: float  # seconds
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    row: int = 0  # data row number in the file, from 1


def _pick(row: dict[str, Any], keys: tuple[str, ...], what: str, where: str) -> tuple[str, Any]:
    """(column, value) of the first of `keys` the row has."""
    for k in keys:
        if k in row:
            if row[k] is None or (isinstance(row[k], str) and not row[k].strip()):
                raise ValueError(f"trace: {where}: {k} is empty")
            return k, row[k]
    cols = ", ".join(str(k) for k in row if k) or "none"
    raise ValueError(f"trace: {where}: no {what} column (one of {', '.join(keys)}; the row has {cols})")


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _seconds(value: Any, ms: bool, where: str, column: str) -> float:
    scale = 1000.0 if ms else 1.0
    text = str(value).strip()
    try:
        x = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float(text)
    except ValueError:
        try:  # Azure: "2023-11-16 18:15:46.6805900" (7 fractional digits)
            return datetime.fromisoformat(_FRACTION.sub(r"\1", text)).timestamp()
        except ValueError:
            raise ValueError(f"trace: {where}: {column} {text!r} is neither seconds nor a date-time") from None
    if not math.isfinite(x):
        raise ValueError(f"trace: {where}: {column} {text!r} is not a time")
    return x / scale


def _length(value: Any, where: str, column: str) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"trace: {where}: {column} {value!r} is not a number of tokens") from None
    if not math.isfinite(x) or x != int(x):
        raise ValueError(f"trace: {where}: {column} {value!r} is not a whole number of tokens")
    if x < 0:
        raise ValueError(f"trace: {where}: {column} is {int(x)}; a token count cannot be negative")
    return int(x)


def _hash_ids(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # a CSV cell: "[1, 2, 3]"
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise ValueError(f"trace: {where}: hash_ids must be a list of integers")
    return tuple(value)


def read_trace(path: Path) -> Iterator[TraceRow]:
    """The file's rows as written, each checked; raises ValueError on the first bad one."""
    try:
        fh = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise ValueError(f"trace: cannot open {path}: {exc.strerror}") from None
    with fh:
        first = fh.readline()
        fh.seek(0)
        jsonl = first.lstrip().startswith("{")
        rows: Iterator[Any] = _jsonl(fh, path.name) if jsonl else csv.DictReader(fh)
        try:
            for n, raw in enumerate(rows, start=1):
                yield _row(raw, n, f"{path.name} row {n}")
        except UnicodeDecodeError as exc:
            raise ValueError(f"trace: {path.name} is not UTF-8 text ({exc.reason})") from None
        except csv.Error as exc:
            raise ValueError(f"trace: {path.name}: not valid CSV ({exc})") from None


def _jsonl(fh: Any, name: str) -> Iterator[Any]:
    n = 0
    for line in fh:
        if not line.strip():
            continue
        n += 1
        try:
            yield json.loads(line.strip())
        except json.JSONDecodeError as exc:
            raise ValueError(f"trace: {name} row {n}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def _row(raw: Any, n: int, where: str) -> TraceRow:
    if not isinstance(raw, dict):
        raise ValueError(f"trace: {where}: not an object with time and length fields")
    row = {str(k).strip().lower(): v for k, v in raw.items() if k is not None}
    mooncake = "input_length" in row
    tcol, tval = _pick(row, TIME_KEYS, "time", where)
    icol, ival = _pick(row, INPUT_KEYS, "input-token", where)
    ocol, oval = _pick(row, OUTPUT_KEYS, "output-token", where)
    return TraceRow(t=_seconds(tval, mooncake, where, tcol), input_tokens=_length(ival, where, icol),
                    output_tokens=_length(oval, where, ocol), hash_ids=_hash_ids(row.get("hash_ids"), where),
                    row=n)


@dataclass
class TraceTable:
    """The rows a run sends, in send order: offsets (s, scaled), lengths, file rows."""

    at: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    rows: np.ndarray
    hash_ids: list[tuple[int, ...]] | None  # per row where the trace has them (Mooncake)
    report: FileReport


def load_trace(path: Path, start_s: float = 0.0, end_s: float | None = None, time_scale: float = 1.0) -> TraceTable:
    """Read, check, sort and slice the trace (see the module docstring for what is changed)."""
    report = FileReport(path.name)
    t, n_in, n_out, rows = array("d"), array("q"), array("q"), array("q")
    hashes: list[tuple[int, ...]] = []
    latest = -math.inf
    for r in read_trace(path):
        report.read += 1
        if r.t < latest:
            report.note("order", r.row, "are earlier than a row before them; all rows are sent in timestamp "
                                        "order (the slice counts from the earliest)")
        latest = max(latest, r.t)
        t.append(r.t)
        n_in.append(r.input_tokens)
        n_out.append(r.output_tokens)
        rows.append(r.row)
        hashes.append(r.hash_ids)
    if not report.read:
        header = path.exists() and path.read_text(encoding="utf-8", errors="replace").strip()
        raise ValueError(f"trace: {path.name} has a header but no rows" if header
                         else f"trace: {path.name} has no rows")
    ts = np.frombuffer(t, dtype=np.float64)
    order = np.argsort(ts, kind="stable")  # stable: rows with equal times keep file order
    rel = ts[order] - ts[order[0]]
    keep = rel >= start_s
    if end_s is not None:
        keep &= rel <= end_s
    if not keep.any():
        end = "the end" if end_s is None else f"{end_s:g} s"
        raise ValueError(f"trace: no row of {path.name} falls between --trace-start {start_s:g} s and {end}; "
                         f"its rows span 0 to {rel[-1]:.3f} s")
    order, rel = order[keep], rel[keep]
    inp = np.frombuffer(n_in, dtype=np.int64)[order]
    out = np.frombuffer(n_out, dtype=np.int64)[order].copy()
    row_no = np.frombuffer(rows, dtype=np.int64)[order]
    any_hash = any(hashes)
    picked = [hashes[i] for i in order.tolist()] if any_hash else None
    send = inp > 0
    for i in np.flatnonzero(~send).tolist():
        report.note("no_input", int(row_no[i]), "have 0 input tokens and are skipped (a request needs a prompt)")
    for i in np.flatnonzero(send & (out == 0)).tolist():
        report.note("no_output", int(row_no[i]), "have 0 output tokens and are sent with max_tokens 1")
    out[out == 0] = 1
    if picked is not None:
        for i in np.flatnonzero(send).tolist():
            ids, need = picked[i], -(-int(inp[i]) // MOONCAKE_BLOCK_TOKENS)
            if ids and len(ids) != need:
                report.note("hash_ids", int(row_no[i]),
                            f"have a number of hash_ids other than ceil(input_length / {MOONCAKE_BLOCK_TOKENS}); "
                            "they are sent with input_length tokens, ids beyond those dropped, tokens beyond "
                            "the ids' blocks unshared")
        picked = [picked[i] for i in np.flatnonzero(send).tolist()]
    rel, inp, out, row_no = rel[send], inp[send], out[send], row_no[send]
    if not len(rel):
        raise ValueError(f"trace: every row of {path.name} in the slice has 0 input tokens; nothing to send")
    for r in row_no.tolist():
        report.mark_used(int(r))
    return TraceTable(at=(rel - rel[0]) * time_scale, input_tokens=inp, output_tokens=out, rows=row_no,
                      hash_ids=picked, report=report)


@dataclass
class Trace:
    path: Path
    tokens: TokenModel
    time_scale: float = 1.0
    start_s: float = 0.0  # slice of the trace's own time axis, from its earliest row
    end_s: float | None = None
    name: str = "trace"
    needs_text: bool = False
    _table: TraceTable | None = field(default=None, repr=False)

    def load(self) -> TraceTable:
        """Read and check the file (once); raises ValueError with a one-line reason."""
        if self._table is None:
            self._table = load_trace(self.path, self.start_s, self.end_s, self.time_scale)
        return self._table

    def warnings(self) -> list[str]:
        return [f"trace: {w}" for w in self.load().report.warnings()]

    def sessions(self, streams: Streams) -> Iterator[Session]:
        # Arrivals and lengths are the file's; only the text is drawn (salted per run, so
        # the blocks one hash id shares are shared within this run, not with the last one).
        tab = self.load()
        rng = streams.text()
        blocks: dict[int, list[str]] = {}
        for i, (at, n_in, n_out) in enumerate(zip(tab.at.tolist(), tab.input_tokens.tolist(),
                                                  tab.output_tokens.tolist(), strict=True)):
            ids = tab.hash_ids[i] if tab.hash_ids is not None else ()
            if ids:
                head, body = self._blocks_prompt(rng, blocks, ids, n_in)
            else:
                head, body = "", self.tokens.text_for(rng, n_in)
            yield single(RequestSpec(label="trace", max_tokens=n_out, prompt=head + body,
                                     target_input_tokens=n_in, at=at, fill=(len(head), len(head) + len(body))))

    def shared_prefix_tokens(self) -> Iterator[int]:
        """Per row of the slice, the prompt tokens an earlier row already sent from the start:
        Mooncake's hash ids chain, so the leading ids seen before are a shared prefix."""
        tab = self.load()
        seen: set[int] = set()
        for i, n_in in enumerate(tab.input_tokens.tolist()):
            ids = self._used_ids(tab.hash_ids[i], n_in) if tab.hash_ids is not None else ()
            lead = 0
            while lead < len(ids) and ids[lead] in seen:
                lead += 1
            seen.update(ids)
            yield min(lead * MOONCAKE_BLOCK_TOKENS, n_in)

    @staticmethod
    def _used_ids(ids: tuple[int, ...], n_in: int) -> tuple[int, ...]:
        return ids[: -(-n_in // MOONCAKE_BLOCK_TOKENS)]

    def _blocks_prompt(self, rng: np.random.Generator, blocks: dict[int, list[str]], ids: tuple[int, ...],
                       n_in: int) -> tuple[str, str]:
        """(shared head, sized tail): the full blocks of the ids, then the last block's leading
        words (or fresh text where the ids cover fewer tokens than the row has)."""
        ids = self._used_ids(ids, n_in)
        for h in ids:
            if h not in blocks:
                blocks[h] = self.tokens.text_for(rng, MOONCAKE_BLOCK_TOKENS, with_overhead=False).split()
        full = ids if len(ids) * MOONCAKE_BLOCK_TOKENS < n_in else ids[:-1]
        head = "".join(" ".join(blocks[h]) + " " for h in full)
        # The BOS/template tokens and what the full blocks leave go to the last part.
        tail = n_in - MOONCAKE_BLOCK_TOKENS * len(full) - self.tokens.overhead - self.tokens.correction(n_in)
        if len(full) < len(ids):
            return head, " ".join(self.tokens.fit(blocks[ids[-1]], tail))
        return head, self.tokens.text_for(rng, tail, with_overhead=False)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"workload": self.name, "trace": str(self.path), "time_scale": self.time_scale,
                               "trace_start_s": self.start_s, "trace_end_s": self.end_s}
        if self._table is not None:
            out["rows"] = self._table.report.describe()
        return out
