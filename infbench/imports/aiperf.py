"""AIPerf (0.13) artifacts: `profile_export.jsonl` records with the aggregate
`profile_export_aiperf.json` beside them (ai-dynamo/aiperf, `--export-level records`).

PATH is the artifact directory or its `profile_export.jsonl`. Each line is one request
(`MetricRecordInfo`): `metadata` (wall-clock ns: `credit_issued_ns` when the timing manager
released the request, the schedule; `request_start_ns`, `request_end_ns`; `benchmark_phase`
`warmup` or `profiling`), `metrics` (name -> `{value, unit}`: `time_to_first_token` ms,
`request_latency` ms, `inter_chunk_latency` a list of ms gaps, `output_sequence_length`,
`input_sequence_length`, `usage_prompt_tokens`, ...) and `error` (`{code, type, message}`)
for a failed request. The aggregate JSON holds `aiperf_version`, `input_config`,
`run_info.cli_command` and one object per metric (`avg`, `std`, `p50`, `p90`, `p99`, ...).

AIPerf's names against infbench's: `time_to_first_token` is TTFT (first content response);
`request_latency` ends at the last content response (usage-only chunks excluded), as
infbench's e2e does; `inter_chunk_latency` is the per-event gap (infbench's raw ITL);
AIPerf's `inter_token_latency` is (request_latency - TTFT) / (OSL - 1), infbench's TPOT.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infbench.imports.model import (
    BadFile,
    Fields,
    ImportedRequest,
    ImportedRun,
    load_json,
    load_jsonl,
    object_at,
)
from infbench.imports.redaction import redact, redact_command

TOOL = "aiperf"
RECORDS = "profile_export.jsonl"
AGGREGATE = "profile_export_aiperf.json"

DEFINITIONS = {
    "ttft": "request start to the first response with content (time_to_first_token)",
    "itl": "inter_chunk_latency: gap between consecutive content responses, per event (raw ITL)",
    "tpot": "inter_token_latency: (request_latency - TTFT) / (output_sequence_length - 1)",
    "e2e": "request_latency: request start to the last content response (usage-only chunks "
           "excluded)",
    "output_tokens": "output_sequence_length: usage.completion_tokens with "
                     "--use-server-token-count, else the output re-tokenized by AIPerf's tokenizer",
    "input_tokens": "usage_prompt_tokens where the server sent usage, else input_sequence_length",
    "failed": "a record with `error`; AIPerf's ITL statistics include failed requests' values "
              "(PERCENTILE_INCLUDES_FAILED_REQUESTS), infbench's leave them out",
    "duration": "benchmark_duration: first request start to last response of the profiling phase",
    "schedule": "credit_issued_ns: when the timing manager released the request",
}
DIFFERENCES = {
    "benchmark_duration": "AIPerf's phase window; infbench's duration is first send to last answer",
    "request_throughput": "divided by AIPerf's benchmark_duration",
    "output_token_throughput": "divided by AIPerf's benchmark_duration",
}

# AIPerf metric -> infbench summary metric name (`{stat}_{name}_ms`).
_LATENCY = {"time_to_first_token": "ttft", "inter_token_latency": "tpot",
            "request_latency": "e2el", "inter_chunk_latency": "raw_itl"}
_STATS = {"avg": "mean", "std": "std", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99",
          "max": "max"}


def _paths(path: Path) -> tuple[Path, Path | None]:
    records = path / RECORDS if path.is_dir() else path
    if not records.is_file():
        raise BadFile(path, "whole file", RECORDS, "missing (run aiperf with --export-level records)")
    aggregate = records.with_name(AGGREGATE)
    return records, aggregate if aggregate.is_file() else None


def _metric(f: Fields, name: str, *, required: bool = False) -> Any:
    m = f.raw(f"metrics.{name}")
    if m is None:
        if required:
            raise f.bad(f"metrics.{name}", "missing")
        return None
    if not isinstance(m, dict) or "value" not in m:
        raise f.bad(f"metrics.{name}", "expected {value, unit}")
    return m["value"]


def _ms(f: Fields, name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise f.bad(f"metrics.{name}.value", f"expected a duration in ms >= 0, got {value!r}")
    return float(value) / 1e3


def _count(f: Fields, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
            or not float(value).is_integer():
        raise f.bad(f"metrics.{name}.value", f"expected a token count, got {value!r}")
    return int(value)


def _request(path: Path, line: int, obj: Any) -> tuple[str, ImportedRequest]:
    f = Fields(path, f"line {line}", obj)
    f.mapping("metadata")
    f.mapping("metrics")
    # Earlier releases (0.1, the repository's examples/artifacts) named these
    # `credit_phase`, `timestamp_ns` and `ttft`.
    phase = (f.text("metadata.benchmark_phase", required=False)
             or f.text("metadata.credit_phase", required=False) or "profiling")
    start_key = "metadata.request_start_ns" if f.raw("metadata.request_start_ns") is not None \
        else "metadata.timestamp_ns"
    start = f.integer(start_key)
    ttft_key = "time_to_first_token" if f.raw("metrics.time_to_first_token") is not None else "ttft"
    credit = f.integer("metadata.credit_issued_ns", required=False)
    err = f.mapping("error", required=False)
    gaps = _metric(f, "inter_chunk_latency")
    if gaps is not None:
        if not isinstance(gaps, list):
            raise f.bad("metrics.inter_chunk_latency.value", "expected a list of ms gaps")
        gaps = tuple(_ms(f, f"inter_chunk_latency[{i}]", g) for i, g in enumerate(gaps))
    usage_in = _count(f, "usage_prompt_tokens", _metric(f, "usage_prompt_tokens"))
    isl = _count(f, "input_sequence_length", _metric(f, "input_sequence_length"))
    error = None
    if err is not None:
        ef = Fields(path, f"line {line}", err)
        error = " ".join(x for x in (ef.text("type", required=False), ef.text("message"))
                         if x)
    ok = error is None
    return phase, ImportedRequest(
        send_ns=start,
        scheduled_ns=credit,
        ttft_s=_ms(f, ttft_key, _metric(f, ttft_key)) if ok else None,
        e2e_s=_ms(f, "request_latency", _metric(f, "request_latency")) if ok else None,
        input_tokens=usage_in if usage_in is not None else isl,
        output_tokens=_count(f, "output_sequence_length", _metric(f, "output_sequence_length")) if ok else None,
        token_gaps_s=gaps if ok else None,
        error=error,
    )


def read(path: Path) -> list[ImportedRun]:
    records, aggregate = _paths(path)
    requests, warmup = [], 0
    for line, obj in load_jsonl(records):
        phase, req = _request(records, line, obj)
        if phase == "warmup":
            warmup += 1  # AIPerf leaves its warm-up out of every statistic, as infbench does
            continue
        requests.append(req)
    requests.sort(key=lambda r: r.scheduled_ns if r.scheduled_ns is not None else r.send_ns or 0)
    notes = []
    if warmup:
        notes.append(f"{warmup} warm-up records left out (AIPerf's statistics leave them out too)")
    doc: dict[str, Any] = {}
    if aggregate is None:
        notes.append(f"no {AGGREGATE} beside the records: no tool version, command or summary to "
                     "compare with")
    else:
        doc = load_json(aggregate)
        Fields(aggregate, "whole file", doc)
    if not any(r.token_gaps_s for r in requests):
        notes.append("no per-token times (inter_chunk_latency): stalls cannot run on this run")
    cfg = object_at(doc, "input_config")
    endpoint = object_at(cfg, "endpoint")
    urls = endpoint.get("urls") or []
    models = ((cfg.get("models") or {}).get("items") or [{}]) if isinstance(cfg.get("models"), dict) else [{}]
    run_info = object_at(doc, "run_info")
    cli = run_info.get("cli_command")
    return [ImportedRun(
        tool=TOOL, source=str(path), record="profiling phase",
        tool_version=doc.get("aiperf_version"),
        command=redact_command(cli) if isinstance(cli, str) else None,
        tool_config=redact(cfg),
        tool_summary=_summary(doc),
        model=models[0].get("name") if models and isinstance(models[0], dict) else None,
        target_url=redact_command(urls[0]) if urls and isinstance(urls[0], str) else None,
        endpoint=endpoint.get("type"),
        started_unix_s=min((r.send_ns / 1e9 for r in requests if r.send_ns is not None), default=None),
        requests=requests, notes=notes)]


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The aggregate as flat keys: `time_to_first_token.p99` -> value, in AIPerf's units
    (0.1 nested the metrics under `records` and called TTFT `ttft`)."""
    out: dict[str, Any] = {}
    records = doc.get("records")
    metrics: dict[str, Any] = records if isinstance(records, dict) else doc
    for name, m in metrics.items():
        name = "time_to_first_token" if name == "ttft" else name
        if isinstance(m, dict) and "unit" in m:
            for stat, v in m.items():
                if stat != "unit" and isinstance(v, int | float):
                    out[f"{name}.{stat}"] = v
    for k in DIFFERENCES:
        if f"{k}.avg" in out:
            out[k] = out[f"{k}.avg"]
    return out


def summary_pairs(tool_summary: dict[str, Any]) -> dict[str, str]:
    pairs = {}
    for metric, ours in _LATENCY.items():
        for stat, ours_stat in _STATS.items():
            pairs[f"{metric}.{stat}"] = (f"raw_{ours_stat}_itl_ms" if ours == "raw_itl"
                                         else f"{ours_stat}_{ours}_ms")
    pairs["completed_request_count.avg"] = "completed"
    pairs["error_request_count.avg"] = "failed"
    pairs["total_osl.avg"] = "total_output_tokens"
    # The input tokens infbench stores are the server's where it sent usage.
    pairs["total_usage_prompt_tokens.avg"] = "total_input_tokens"
    return {k: v for k, v in pairs.items() if k in tool_summary}
