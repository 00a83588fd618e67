"""inference-perf (0.7) per-request lifecycle reports (kubernetes-sigs/inference-perf,
`report.request_lifecycle.per_request: true`).

PATH is the report directory or its `per_request_lifecycle_metrics.json`: a list with one
entry per request, `start_time` / `end_time` (perf_counter seconds), `error` (`{error_type,
error_msg}` or null), `info` (`request_metrics.text.input_tokens`,
`response_metrics.output_tokens` (the client's re-tokenized count), `server_usage`,
`output_token_times`: per output token, re-derived from the streamed chunks) and, with
`per_request_fields.computed_metrics`, `computed_metrics` (`time_to_first_token`,
`time_per_output_token`, `inter_token_latencies`, `request_latency`, `input_tokens`,
`output_tokens`, seconds). `summary_lifecycle_metrics.json` beside it holds the aggregate
(`successes.latency.<metric>.{mean, median, p90, ..., max}` in seconds, counts, tokens);
`config.yaml` the run's configuration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from infbench.imports.model import (
    BadFile,
    Fields,
    ImportedRequest,
    ImportedRun,
    load_json,
    ns,
    object_at,
)
from infbench.imports.redaction import REDACTED, redact_command

TOOL = "inference-perf"
RECORDS = "per_request_lifecycle_metrics.json"
SUMMARY = "summary_lifecycle_metrics.json"
CONFIG = "config.yaml"

DEFINITIONS = {
    "ttft": "first output token time - start_time",
    "itl": "gaps between consecutive output token times (per token, re-derived from the "
           "chunks by the client's tokenizer)",
    "tpot": "time_per_output_token: (last token - first token) / (output tokens - 1)",
    "e2e": "request_latency: end_time - start_time, to the end of the response",
    "output_tokens": "the client's re-tokenized count (server_usage with "
                     "use_server_output_tokens); imported: server_usage where present",
    "input_tokens": "request_metrics.text.input_tokens",
    "failed": "an entry with `error`; left out of the successes' statistics",
    "percentiles": "numpy-style interpolation over the successes",
    "schedule": "not in the per-request report (the summary has schedule_delay statistics)",
}
DIFFERENCES = {
    **{f"request_latency.{s}": "ends at the end of the response; infbench's e2e ends at the "
                               "last token" for s in ("mean", "median", "p90", "p95", "p99", "max")},
    **{f"time_per_output_token.{s}": "divides by the client's re-tokenized output count; infbench "
                                      "by the server's (usage), which the import keeps"
       for s in ("mean", "median", "p90", "p95", "p99", "max")},
    "benchmark_time_seconds": "inference-perf's whole run; infbench's duration is first send to last answer",
}
_LATENCY = {"time_to_first_token": "ttft", "inter_token_latency": "raw_itl"}
_STATS = {"mean": "mean", "median": "median", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max"}
# A config.yaml key whose value (or block below it) may hold a credential.
_SECRET_KEY = re.compile(r"(api_key|token(?!izer|s)|secret|password|authorization|headers)",
                         re.IGNORECASE)
_YAML_KEY = re.compile(r"^(\s*)(-\s+)?([\w.-]+):\s*(.*)$")


def _redact_yaml(text: str) -> str:
    """The config text with the value of every credential-like key replaced, and the block
    under such a key (a `headers:` mapping) replaced by one `<redacted>` line."""
    out: list[str] = []
    block_indent: int | None = None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if not line.strip() or indent > block_indent:
                continue
            block_indent = None
        m = _YAML_KEY.match(line)
        if m and _SECRET_KEY.search(m.group(3)) and m.group(4) not in ("null", "~", "{}", "[]", "''", '""'):
            out.append(f"{m.group(1)}{m.group(2) or ''}{m.group(3)}: {REDACTED}")
            if not m.group(4):
                block_indent = indent
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _paths(path: Path) -> tuple[Path, Path | None, Path | None]:
    records = path / RECORDS if path.is_dir() else path
    if not records.is_file():
        raise BadFile(path, "whole file", RECORDS, "missing (set report.request_lifecycle.per_request: true)")
    summary, config = records.with_name(SUMMARY), records.with_name(CONFIG)
    return records, summary if summary.is_file() else None, config if config.is_file() else None


def _seconds(f: Fields, name: str, values: Any) -> tuple[float, ...]:
    if not isinstance(values, list):
        raise f.bad(name, "expected a list of seconds")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise f.bad(f"{name}[{i}]", f"expected seconds, got {v!r}")
    return tuple(float(v) for v in values)


def _request(path: Path, i: int, obj: Any) -> ImportedRequest:
    f = Fields(path, f"request {i}", obj)
    start = f.number("start_time", minimum=None)
    err = f.mapping("error", required=False)
    if err is not None:
        text = " ".join(str(err[k]) for k in ("error_type", "error_msg") if err.get(k))
        return ImportedRequest(send_ns=ns(start), ttft_s=None, e2e_s=None, output_tokens=None,
                               input_tokens=f.integer("info.request_metrics.text.input_tokens", required=False),
                               error=text or "error without a message")
    if f.mapping("computed_metrics", required=False) is not None:
        ttft = f.number("computed_metrics.time_to_first_token", required=False)
        gaps = _seconds(f, "computed_metrics.inter_token_latencies",
                        f.raw("computed_metrics.inter_token_latencies") or [])
        n_in = f.integer("computed_metrics.input_tokens", required=False)
        n_out = f.integer("computed_metrics.output_tokens", required=False)
    else:
        times = _seconds(f, "info.response_metrics.output_token_times",
                         f.raw("info.response_metrics.output_token_times") or [])
        ttft = times[0] - start if times else None
        gaps = tuple(b - a for a, b in zip(times, times[1:], strict=False))
        n_in = f.integer("info.request_metrics.text.input_tokens", required=False)
        n_out = f.integer("info.response_metrics.output_tokens", required=False)
    # The server's count where it sent usage: inference-perf's own is the client's
    # re-tokenization (13-16 for 16 generated tokens here), and a replay must ask for what
    # the server generated.
    served = f.integer("info.response_metrics.server_usage.completion_tokens", required=False)
    n_out = served if served is not None else n_out
    end = f.number("end_time", required=False, minimum=None)
    return ImportedRequest(
        send_ns=ns(start), ttft_s=ttft,
        e2e_s=None if ttft is None else ttft + sum(gaps),  # the last token, as infbench's e2e
        stream_end_s=None if end is None else end - start,
        input_tokens=n_in, output_tokens=n_out, token_gaps_s=gaps if ttft is not None else None)


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ok = object_at(doc, "successes")
    latency = object_at(ok, "latency")
    for metric in (*_LATENCY, "time_per_output_token", "request_latency"):
        stats = latency.get(metric)
        if isinstance(stats, dict):
            # seconds in the file; ms here, as infbench's keys are
            out.update({f"{metric}.{k}": v * 1e3 for k, v in stats.items() if isinstance(v, int | float)})
    if isinstance(ok.get("count"), int):
        out["successes.count"] = ok["count"]
    fail = doc.get("failures")
    if isinstance(fail, dict) and isinstance(fail.get("count"), int):
        out["failures.count"] = fail["count"]
    tokens = ok.get("prompt_tokens")
    if isinstance(tokens, dict) and isinstance(tokens.get("total"), int | float):
        out["prompt_tokens.total"] = tokens["total"]
    if isinstance(doc.get("benchmark_time_seconds"), int | float):
        out["benchmark_time_seconds"] = doc["benchmark_time_seconds"]
    return out


def summary_pairs(tool_summary: dict[str, Any]) -> dict[str, str]:
    pairs = {f"{m}.{s}": (f"raw_{o}_itl_ms" if ours == "raw_itl" else f"{o}_{ours}_ms")
             for m, ours in _LATENCY.items() for s, o in _STATS.items()}
    pairs.update({"successes.count": "completed", "failures.count": "failed",
                  "prompt_tokens.total": "total_input_tokens"})
    return {k: v for k, v in pairs.items() if k in tool_summary}


def read(path: Path) -> list[ImportedRun]:
    records, summary, config = _paths(path)
    doc = load_json(records)
    if not isinstance(doc, list):
        raise BadFile(records, "whole file", "(records)", "expected a list of per-request entries")
    requests = [_request(records, i, obj) for i, obj in enumerate(doc)]
    requests.sort(key=lambda r: r.send_ns or 0)
    notes = ["inference-perf's per-request report has no schedule: the workload fingerprint is "
             "built from lengths only", "no inference-perf version in its reports"]
    agg: dict[str, Any] = {}
    if summary is None:
        notes.append(f"no {SUMMARY} beside the records: no summary to compare with")
    else:
        loaded = load_json(summary)
        agg = loaded if isinstance(loaded, dict) else {}
    cfg_text = None
    if config is not None:
        # YAML, which infbench does not parse: kept as text, credentials redacted.
        cfg_text = _redact_yaml(config.read_text(encoding="utf-8", errors="replace"))
    server = re.search(r"(?m)^server:\s*\n((?:\s+.*\n)+)", cfg_text or "")
    model = re.search(r"(?m)^\s+model_name:\s*(\S+)", server.group(1)) if server else None
    url = re.search(r"(?m)^\s+base_url:\s*(\S+)", server.group(1)) if server else None
    return [ImportedRun(
        tool=TOOL, source=str(path), record="whole report", tool_version=None, command=None,
        tool_config={"config_yaml": redact_command(cfg_text)} if cfg_text else {},
        tool_summary=_summary(agg), model=model.group(1) if model else None,
        target_url=url.group(1) if url else None, endpoint=None, started_unix_s=None,
        requests=requests, notes=notes)]
