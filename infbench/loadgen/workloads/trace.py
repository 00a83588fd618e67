"""Trace replay: arrivals with lengths from a CSV or JSONL file, read as published.

Recognised columns (case-insensitive): a time (`timestamp`; Azure's `TIMESTAMP` as a date-time;
seconds otherwise, Mooncake's milliseconds), input tokens (`ContextTokens`, `input_tokens`,
`input_length`, `prompt_tokens`) and output tokens (`GeneratedTokens`, `output_tokens`,
`output_length`, `completion_tokens`). Mooncake's `hash_ids` (one id per 512-token block) are
honoured: blocks with the same id get the same text, so prefix sharing is replayed too.
Arrival offsets are relative to the first row of the slice, times `time_scale`.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.base import RequestSpec, Session, single
from infbench.loadgen.workloads.prompts import TokenModel, random_words

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


def _pick(row: dict[str, Any], keys: tuple[str, ...], what: str, where: str) -> Any:
    for k in keys:
        if k in row and row[k] not in (None, ""):
            return row[k]
    raise ValueError(f"trace: {where} has no {what} column (one of {', '.join(keys)})")


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _seconds(value: Any, ms: bool, where: str) -> float:
    if isinstance(value, int | float):
        return float(value) / (1000.0 if ms else 1.0)
    text = str(value).strip()
    try:
        return float(text) / (1000.0 if ms else 1.0)
    except ValueError:
        pass
    try:  # Azure: "2023-11-16 18:15:46.6805900" (7 fractional digits)
        return datetime.fromisoformat(_FRACTION.sub(r"\1", text)).timestamp()
    except ValueError:
        raise ValueError(f"trace: {where}: timestamp {text!r} is neither seconds nor a date-time") from None


def read_trace(path: Path) -> Iterator[TraceRow]:
    try:
        fh = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise ValueError(f"trace: cannot open {path}: {exc.strerror}") from None
    with fh:
        first = fh.readline()
        fh.seek(0)
        jsonl = first.lstrip().startswith("{")
        rows: Iterator[dict[str, Any]]
        rows = (json.loads(line) for line in fh if line.strip()) if jsonl else csv.DictReader(fh)
        for n, raw in enumerate(rows, start=1):
            where = f"{path.name} row {n}"
            row = {str(k).strip().lower(): v for k, v in raw.items()}
            mooncake = "input_length" in row
            try:
                yield TraceRow(
                    t=_seconds(_pick(row, TIME_KEYS, "time", where), mooncake, where),
                    input_tokens=int(float(_pick(row, INPUT_KEYS, "input-token", where))),
                    output_tokens=int(float(_pick(row, OUTPUT_KEYS, "output-token", where))),
                    hash_ids=tuple(int(h) for h in row.get("hash_ids") or ()),
                )
            except (TypeError, ValueError) as exc:
                if str(exc).startswith("trace:"):
                    raise
                raise ValueError(f"trace: {where}: {exc}") from None


@dataclass
class Trace:
    path: Path
    tokens: TokenModel
    time_scale: float = 1.0
    start_s: float = 0.0  # slice of the trace's own time axis, from its first row
    end_s: float | None = None
    name: str = "trace"
    needs_text: bool = False

    def rows(self) -> Iterator[tuple[float, TraceRow]]:
        """The slice's rows with their arrival offsets (s from the slice's first row, scaled)."""
        t_first: float | None = None
        t_slice: float | None = None
        for row in read_trace(self.path):
            if t_first is None:
                t_first = row.t
            rel = row.t - t_first
            if rel < self.start_s:
                continue
            if self.end_s is not None and rel > self.end_s:
                return
            if t_slice is None:
                t_slice = rel
            yield (rel - t_slice) * self.time_scale, row

    def sessions(self, streams: Streams) -> Iterator[Session]:
        # Arrivals and lengths are the file's; only the text is drawn (salted per run, so
        # the blocks one hash id shares are shared within this run, not with the last one).
        rng = streams.text()
        blocks: dict[int, str] = {}
        for at, row in self.rows():
            if row.hash_ids:
                prompt = self._blocks_prompt(rng, blocks, row)
            else:
                prompt = random_words(rng, self.tokens.words_for(row.input_tokens))
            yield single(RequestSpec(
                label="trace", max_tokens=max(1, row.output_tokens), prompt=prompt,
                target_input_tokens=row.input_tokens, at=at))

    def shared_prefix_tokens(self) -> Iterator[int]:
        """Per row of the slice, the prompt tokens an earlier row already sent from the start:
        Mooncake's hash ids chain, so the leading ids seen before are a shared prefix."""
        seen: set[int] = set()
        for _, row in self.rows():
            lead = 0
            while lead < len(row.hash_ids) and row.hash_ids[lead] in seen:
                lead += 1
            seen.update(row.hash_ids)
            yield min(lead * MOONCAKE_BLOCK_TOKENS, row.input_tokens)

    def _blocks_prompt(self, rng: np.random.Generator, blocks: dict[int, str], row: TraceRow) -> str:
        parts = []
        for i, h in enumerate(row.hash_ids):
            if h not in blocks:
                blocks[h] = random_words(rng, self.tokens.words_for(MOONCAKE_BLOCK_TOKENS, with_overhead=False))
            block = blocks[h]
            if i == len(row.hash_ids) - 1:  # the last block is partial
                tail = row.input_tokens - MOONCAKE_BLOCK_TOKENS * i
                block = " ".join(block.split()[: self.tokens.words_for(max(1, tail), with_overhead=False)])
            parts.append(block)
        return " ".join(parts)

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "trace": str(self.path), "time_scale": self.time_scale,
                "trace_start_s": self.start_s, "trace_end_s": self.end_s}
