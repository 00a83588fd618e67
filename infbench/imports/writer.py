"""Imported runs into the store: a `runs` row, `requests`, and `chunks` where the tool kept
per-token times; the summary recomputed from those rows beside the tool's own.

Everything is read and checked before the first row is written, and all runs of one
`infbench import --from` go in one transaction: a bad file leaves the store as it was.

How a tool's request lands in the store (times in ns from the run's first send):
- `send_ns` is the tool's send time; `intended_send_ns` its scheduled time where the file has
  one (NULL otherwise, so the `*_intended` metrics are NULL);
- `first_content_ns` = send + TTFT; `last_choices_ns` = send + the tool's e2e, which is where
  infbench's e2e and TPOT end too (the `request_latency` view);
- with per-token gaps, one content chunk per event the tool saw, each its own read (the tool
  did not record reads, so nothing is marked coalesced and spread ITL equals per-event ITL);
- where the tool also timed the end of the stream (guidellm, inference-perf), `end_ns` and
  `done_ns` are there, so `request_latency.trailing_ms` is the tool's e2e less infbench's;
- `prompt_tokens` / `output_tokens` are the tool's counts (`*_tokens_source` = `tool`);
- a failed request has `error_class` = `tool_error` and the tool's text in `error_message`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, overload

import duckdb

from infbench import __version__
from infbench.imports.model import ImportedRequest, ImportedRun
from infbench.loadgen.summary import summarize
from infbench.store.runs import new_run_id
from infbench.store.transaction import transaction
from infbench.store.writer import insert_batch, to_arrow

ERROR_CLASS = "tool_error"
LABEL = "imported"
IMPORT_FINGERPRINT_VERSION = 1
_MAX_ERROR_TEXT = 500


@overload
def _ns(seconds: float) -> int: ...
@overload
def _ns(seconds: float | None) -> int | None: ...
def _ns(seconds: float | None) -> int | None:
    return None if seconds is None else int(round(seconds * 1e9))


def import_fingerprint(run: ImportedRun) -> str:
    """`wi1-` and a hash of each request's (input tokens, output length asked for or produced,
    scheduled offset in ms where the file has one), in request order: equal for two files
    that sent the same lengths in the same order."""
    t0 = min((r.scheduled_ns for r in run.requests if r.scheduled_ns is not None), default=None)
    body = [[r.input_tokens, r.max_tokens if r.max_tokens is not None else r.output_tokens,
             None if r.scheduled_ns is None or t0 is None else round((r.scheduled_ns - t0) / 1e6)]
            for r in run.requests]
    h = hashlib.sha256(json.dumps(body, separators=(",", ":")).encode())
    return f"wi{IMPORT_FINGERPRINT_VERSION}-{h.hexdigest()[:32]}"


def _columns(run: ImportedRun) -> tuple[dict[str, list[Any]], dict[str, list[Any]], int]:
    """The requests and chunks columns, and the run's t0 on the tool's clock in ns."""
    sends = [r.send_ns for r in run.requests if r.send_ns is not None]
    t0 = min(sends) if sends else 0
    req: dict[str, list[Any]] = {k: [] for k in (
        "request_idx", "label", "phase", "intended_send_ns", "send_ns", "first_chunk_ns",
        "first_content_ns", "last_content_ns", "last_chunk_ns", "last_choices_ns", "end_ns",
        "done_ns", "error_class", "error_message", "prompt_tokens", "prompt_tokens_source", "max_tokens",
        "output_tokens", "output_tokens_source", "num_chunks", "num_content_chunks", "num_reads",
        "coalesced_chunks")}
    chunks: dict[str, list[Any]] = {k: [] for k in (
        "request_idx", "seq", "t_ns", "read_idx", "content", "coalesced")}
    for i, r in enumerate(run.requests):
        send = None if r.send_ns is None else r.send_ns - t0
        row = _request_times(r, send)
        times = _chunk_times(r, send)
        for seq, t in enumerate(times):
            chunks["request_idx"].append(i)
            chunks["seq"].append(seq)
            chunks["t_ns"].append(t)
            chunks["read_idx"].append(seq)
            chunks["content"].append(True)
            chunks["coalesced"].append(False)
        n_chunks = len(times) if times else None
        row.update(
            request_idx=i, label=LABEL, phase="measure",
            intended_send_ns=None if r.scheduled_ns is None else r.scheduled_ns - t0,
            error_class=None if r.error is None else ERROR_CLASS,
            error_message=None if r.error is None else r.error[:_MAX_ERROR_TEXT],
            prompt_tokens=r.input_tokens,
            prompt_tokens_source=None if r.input_tokens is None else "tool",
            max_tokens=r.max_tokens, output_tokens=r.output_tokens,
            output_tokens_source=None if r.output_tokens is None else "tool",
            num_chunks=n_chunks, num_content_chunks=n_chunks, num_reads=n_chunks,
            coalesced_chunks=0 if times else None)
        for k, v in row.items():
            req[k].append(v)
    return req, chunks, t0


def _request_times(r: ImportedRequest, send: int | None) -> dict[str, Any]:
    if send is None or r.error is not None:
        return dict(send_ns=send, first_chunk_ns=None, first_content_ns=None, last_content_ns=None,
                    last_chunk_ns=None, last_choices_ns=None, end_ns=send, done_ns=None)
    first = None if r.ttft_s is None else send + _ns(r.ttft_s)
    end = None if r.e2e_s is None else send + _ns(r.e2e_s)
    times = _chunk_times(r, send)
    last_content = times[-1] if times else end
    stream_end = None if r.stream_end_s is None else send + _ns(r.stream_end_s)
    return dict(send_ns=send, first_chunk_ns=first, first_content_ns=first,
                last_content_ns=last_content, last_chunk_ns=stream_end or end, last_choices_ns=end,
                end_ns=stream_end or end, done_ns=stream_end)


def _chunk_times(r: ImportedRequest, send: int | None) -> list[int]:
    if send is None or r.error is not None or r.ttft_s is None or r.token_gaps_s is None:
        return []
    # Accumulate in seconds and round each stamp once, so rounding does not add up.
    t, out = r.ttft_s, [send + _ns(r.ttft_s)]
    for g in r.token_gaps_s:
        t += g
        out.append(send + _ns(t))
    return out


@dataclass(frozen=True)
class StoredImport:
    run_id: str
    source: str
    record: str
    requests: int
    chunks: int
    summary: dict[str, Any]


def _status(run: ImportedRun) -> tuple[str, str | None]:
    failed = sum(1 for r in run.requests if r.error is not None)
    if not failed:
        return "completed", None
    return "completed_with_errors", f"{failed} of {len(run.requests)} requests failed in {run.tool} ({ERROR_CLASS})"


def _config(run: ImportedRun, definitions: dict[str, str]) -> dict[str, Any]:
    return {
        "imported": {
            "tool": run.tool, "tool_version": run.tool_version, "source": run.source,
            "record": run.record, "command": run.command, "tool_config": run.tool_config,
            "definitions": definitions, "tool_summary": run.tool_summary, "notes": run.notes,
            "started_unix_s": run.started_unix_s,
        },
        "workload": {"workload": f"imported:{run.tool}"},
        "target": {"url": run.target_url, "model": run.model, "endpoint": run.endpoint},
    }


def store_runs(con: duckdb.DuckDBPyConnection, runs: list[ImportedRun],
               definitions: dict[str, dict[str, str]],
               check: Any) -> list[StoredImport]:
    """Write every run in one transaction; `check(run, summary)` returns the comparison of the
    recomputed summary with the tool's own, stored under `summary.imported.check`.

    Ownership: the caller owns `con` (opened writable)."""
    out = []
    now = datetime.now(UTC).replace(tzinfo=None)  # naive UTC, as `store.runs` writes it
    with transaction(con, "import failed"):
        for run in runs:
            run_id = new_run_id()
            req, chunks, t0 = _columns(run)
            status, reason = _status(run)
            con.execute(
                "INSERT INTO runs (run_id, created_at, finished_at, status, status_reason, target_url, "
                "model, endpoint, config, t0_monotonic_ns, t0_unix_ns, infbench_version, workload_fingerprint) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, now, now, status, reason, run.target_url, run.model, run.endpoint,
                 json.dumps(_config(run, definitions[run.tool]), sort_keys=True, default=str), t0,
                 _ns(run.started_unix_s), __version__, import_fingerprint(run)])
            insert_batch(con, run_id, "requests", to_arrow("requests", req))
            if chunks["t_ns"]:
                insert_batch(con, run_id, "chunks", to_arrow("chunks", chunks))
            summary = summarize(con, run_id)
            summary["imported"] = {"tool": run.tool, "notes": run.notes, "check": check(run, summary)}
            con.execute("UPDATE runs SET summary = ? WHERE run_id = ?",
                        [json.dumps(summary, sort_keys=True, default=str), run_id])
            out.append(StoredImport(run_id, run.source, run.record, len(run.requests),
                                    len(chunks["t_ns"]), summary))
    return out


