"""Replay: requests given one by one, as measured from stored runs (`diagnose dilution`).

Each row says what one request sends: its prompt length, its output length (sent as
`max_tokens`, with the run's `ignore_eos`, so the engine generates exactly that many), how
many leading prompt tokens it shares with the run's other requests, whether it asks for a
JSON schema, and (for a replayed schedule) its arrival offset. The rows come from two runs
mixed property by property, so a benchmark can be re-run with one production property
swapped in.

A shared prefix is the start of one document per run: a row sharing P tokens sends the
document's first P tokens (BOS and template included in P), then fresh words. Rows sharing
different lengths share their common leading part, as a prefix cache holds it; the first row
carries the longest start any row shares (it misses, as the first request of a run does). The label
says what an earlier row of the run already sent (`prefix-N`: N tokens; `unshared`), which
the prefix-cache check reads as the share the workload itself repeats (`loadgen.cache_share`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.base import RequestSpec, Session, single
from infbench.loadgen.workloads.prompts import TokenModel
from infbench.loadgen.workloads.synthetic import SCHEMAS


@dataclass(frozen=True, slots=True)
class ReplayRow:
    input_tokens: int
    output_tokens: int
    shared_tokens: int = 0       # leading prompt tokens shared with the run's other rows
    schema: str | None = None    # a JSON schema's label (structured output), None: plain text
    at: float | None = None      # arrival offset (s): used when the run's arrivals are `trace`

    def __post_init__(self) -> None:
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"replay: a row needs input and output tokens >= 1, got "
                             f"{self.input_tokens} and {self.output_tokens}")
        if self.shared_tokens < 0:
            raise ValueError(f"replay: shared tokens must be >= 0, got {self.shared_tokens}")


@dataclass
class Replay:
    rows: tuple[ReplayRow, ...]
    tokens: TokenModel
    # label -> JSON schema for the rows that ask for one (the structured source run's own
    # schemas, rebuilt by the caller); a label not in it gets the fixed SCHEMAS' of that name,
    # else the first of them.
    schemas: dict[str, dict[str, Any]] | None = None
    description: dict[str, Any] | None = None  # what the caller wants kept in the run's config
    name: str = "replay"
    needs_text: bool = False

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError("replay: no rows to send")

    def _schema(self, label: str) -> dict[str, Any]:
        table = self.schemas or {}
        return table.get(label) or SCHEMAS.get(label) or SCHEMAS[sorted(SCHEMAS)[0]]

    def sessions(self, streams: Streams) -> Iterator[Session]:
        text = streams.text()
        document: list[str] = []   # the run's shared document, grown as rows need more
        doc_tokens = 0.0
        sent_shared = 0            # the longest shared start an earlier row sent
        # The first row carries the document's start: in the run measured, whatever the first
        # hit found was sent by a request before it that missed (a group's first), and the
        # first request of a run always misses. Without this, the first sharing row would miss.
        seed = max(min(r.shared_tokens, r.input_tokens) for r in self.rows)
        for k, row in enumerate(self.rows):
            shared = min(row.shared_tokens if k else seed, row.input_tokens)
            body = shared - self.tokens.overhead  # BOS and template are in every prompt anyway
            head = ""
            if shared > 0 and body >= 1:
                while doc_tokens < body + 8:  # appended to, never changed: rows keep sharing
                    more = self.tokens.text_for(text, body - doc_tokens + 64, with_overhead=False)
                    document += more.split()
                    doc_tokens += self.tokens.content_tokens(more)
                head = " ".join(self.tokens.fit(document, body)) + " "
            rest = (row.input_tokens - (self.tokens.content_tokens(head) if head else 0)
                    - self.tokens.overhead - self.tokens.correction(row.input_tokens))
            tail = self.tokens.text_for(text, max(1.0, rest), with_overhead=False)
            repeated = min(shared, sent_shared)
            label = f"prefix-{repeated}" if repeated > 0 else "unshared"
            sent_shared = max(sent_shared, shared)
            extra = None
            if row.schema is not None:
                label = f"{label}:{row.schema}"
                extra = {"response_format": {"type": "json_schema", "json_schema": {
                    "name": row.schema, "schema": self._schema(row.schema)}}}
            yield single(RequestSpec(label=label, max_tokens=row.output_tokens, prompt=head + tail,
                                     target_input_tokens=row.input_tokens, extra=extra, at=row.at,
                                     fill=(len(head), len(head) + len(tail))))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "rows": len(self.rows), **(self.description or {})}


def repeated_prefix(label: str | None) -> int:
    """The tokens a replay row's label says an earlier row of its run already sent."""
    if not label or not label.startswith("prefix-"):
        return 0
    return int(label.split(":", 1)[0].removeprefix("prefix-"))
