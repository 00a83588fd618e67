"""guidellm (0.8) benchmark reports: `benchmarks.json` (`--output kind=json`).

The report (`GenerativeBenchmarksReport`) holds `metadata.guidellm_version`, `config.spec`
(backend, profile, constraints, data, ...) and `benchmarks`: one per strategy run (a sweep
writes several), each one run here. A benchmark has `requests.successful`, `.errored` and
`.incomplete` (requests cut off when the benchmark ended), each a list of per-request stats:
`request_start_time` / `request_end_time` (Unix seconds), `time_to_first_token_ms`,
`request_latency` (s), `prompt_tokens`, `output_tokens`, `inter_token_latency_ms`, and
`info.timings` (`targeted_start`: the schedule; `first_token_iteration`,
`last_token_iteration`), `info.error` for a failed one. `metrics` holds the aggregates
(`time_to_first_token_ms.successful.{mean, std_dev, max, count, percentiles}`, ...).

guidellm keeps no per-token times: the requests are imported without chunks.

`benchmarks.yaml` / `.yml` (`--output kind=yaml`, or a path with that extension) is the same
report through PyYAML's `yaml.dump`; it is read by `dumped_yaml` (no YAML dependency) into
the same document, so both formats give the same runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infbench.imports.dumped_yaml import DumpedYamlError, loads
from infbench.imports.model import (
    BadFile,
    Fields,
    ImportedRequest,
    ImportedRun,
    file_text,
    load_json,
    ns,
    object_at,
)
from infbench.imports.redaction import redact

TOOL = "guidellm"

DEFINITIONS = {
    "ttft": "request start to the first iteration that carried a token (time_to_first_token_ms)",
    "itl": "inter_token_latency_ms: (last token - first token) / (output tokens - 1) per request "
           "(infbench's TPOT); the aggregate weighs each request by its output tokens - 1",
    "tpot": "time_per_output_token_ms: (last token - request start) / output tokens, TTFT "
            "included; the aggregate weighs each request by its output tokens",
    "e2e": "request_latency: request start to the end of the response stream (after the last "
           "token: usage and [DONE] included)",
    "output_tokens": "usage from the server where sent (prefer_response_metrics), else counted",
    "input_tokens": "usage.prompt_tokens where sent, else the tokenizer's count",
    "failed": "requests.errored; requests.incomplete were cut off when the benchmark ended; "
              "both are left out of the successful statistics",
    "percentiles": "the smallest value whose cumulative share reaches p (no interpolation)",
    "schedule": "info.timings.targeted_start: when the profile meant to send the request",
}
DIFFERENCES = {
    "request_latency": "ends when the stream closed; infbench's e2e ends at the last token "
                       "(the difference is the run's trailing_ms)",
    "inter_token_latency_ms": "token-weighted over requests; infbench's TPOT is per request",
    "time_per_output_token_ms": "includes TTFT and is token-weighted; no infbench counterpart",
    "percentiles": "guidellm takes the nearest sample, infbench interpolates (quantile_cont)",
    "duration": "guidellm's measured window; infbench's is first send to last answer",
}


def _request(path: Path, record: str, obj: Any, failed: str | None) -> ImportedRequest:
    f = Fields(path, record, obj)
    start = f.number("request_start_time", required=failed is None, minimum=None)
    info = f.mapping("info", required=False) or {}
    timings = object_at(info, "timings")
    scheduled = timings.get("targeted_start")
    if scheduled is not None and (isinstance(scheduled, bool) or not isinstance(scheduled, int | float)):
        raise f.bad("info.timings.targeted_start", f"expected Unix seconds, got {scheduled!r}")
    first, last = timings.get("first_token_iteration"), timings.get("last_token_iteration")
    error = None
    if failed is not None:
        error = f"{failed}: {info.get('error') or 'no error text'}"
    ttft_ms = None if failed else f.number("time_to_first_token_ms", required=False)
    e2e = None
    if failed is None and start is not None and isinstance(last, int | float):
        e2e = float(last) - start  # the last token: where infbench's e2e ends
    elif failed is None and first is None:
        e2e = f.number("request_latency", required=False)
    stream_end = None if failed else f.number("request_latency", required=False)
    return ImportedRequest(
        send_ns=ns(start), scheduled_ns=ns(None if scheduled is None else float(scheduled)),
        ttft_s=None if ttft_ms is None else ttft_ms / 1e3, e2e_s=e2e, stream_end_s=stream_end,
        input_tokens=f.integer("prompt_tokens", required=False),
        output_tokens=None if failed else f.integer("output_tokens", required=False),
        error=error)


def _stat(metrics: dict[str, Any], name: str, stat: str) -> Any:
    m = metrics.get(name)
    ok = m.get("successful") if isinstance(m, dict) else None
    return ok.get(stat) if isinstance(ok, dict) else None


def _summary(bench: dict[str, Any]) -> dict[str, Any]:
    metrics = object_at(bench, "metrics")
    out: dict[str, Any] = {}
    for name in ("time_to_first_token_ms", "inter_token_latency_ms", "time_per_output_token_ms",
                 "request_latency", "prompt_token_count", "output_token_count"):
        for stat in ("mean", "median", "std_dev", "max", "count", "total_sum"):
            v = _stat(metrics, name, stat)
            if isinstance(v, int | float):
                out[f"{name}.{stat}"] = v
    totals = metrics.get("request_totals")
    if isinstance(totals, dict):
        out.update({f"request_totals.{k}": v for k, v in totals.items() if isinstance(v, int)})
    if isinstance(bench.get("duration"), int | float):
        out["duration"] = bench["duration"]
    return out


def summary_pairs(tool_summary: dict[str, Any]) -> dict[str, str]:
    pairs = {"time_to_first_token_ms.mean": "mean_ttft_ms",
             "time_to_first_token_ms.std_dev": "std_ttft_ms",
             "time_to_first_token_ms.max": "max_ttft_ms",
             "request_totals.successful": "completed",
             "prompt_token_count.total_sum": "total_input_tokens",
             "output_token_count.total_sum": "total_output_tokens"}
    return {k: v for k, v in pairs.items() if k in tool_summary}


YAML_SUFFIXES = (".yaml", ".yml")


def load_report(path: Path) -> Any:
    """The report document: YAML by the file's extension (as guidellm decides), else JSON."""
    if path.suffix.lower() not in YAML_SUFFIXES:
        return load_json(path)
    try:
        return loads(file_text(path))
    except DumpedYamlError as exc:
        raise BadFile(path, f"line {exc.line}", "(YAML)", f"not the YAML guidellm writes ({exc.message})") from None


def read(path: Path) -> list[ImportedRun]:
    doc = load_report(path)
    top = Fields(path, "whole file", doc)
    benches = top.array("benchmarks")
    spec = top.mapping("config.spec", required=False) or {}
    backend = object_at(spec, "backend")
    runs = []
    for b, bench in enumerate(benches or []):
        bf = Fields(path, f"benchmarks[{b}]", bench)
        reqs = bf.mapping("requests")
        assert reqs is not None
        requests = []
        for kind, failed in (("successful", None), ("errored", "errored"), ("incomplete", "incomplete")):
            items = bf.array(f"requests.{kind}", required=kind == "successful") or []
            for i, item in enumerate(items):
                requests.append(_request(path, f"benchmarks[{b}].requests.{kind}[{i}]", item, failed))
        # Send order: the three lists are grouped by outcome, the run was not.
        requests.sort(key=lambda r: r.scheduled_ns if r.scheduled_ns is not None else (r.send_ns or 0))
        strategy = bf.mapping("config.strategy", required=False) or {}
        runs.append(ImportedRun(
            tool=TOOL, source=str(path),
            record=f"benchmark {b} ({strategy.get('type_', 'strategy unknown')})",
            tool_version=top.text("metadata.guidellm_version", required=False),
            command=None,
            tool_config=redact({"spec": spec, "strategy": strategy}),
            tool_summary=_summary(bench),
            model=backend.get("model") if isinstance(backend.get("model"), str) else None,
            target_url=backend.get("target") if isinstance(backend.get("target"), str) else None,
            endpoint=backend.get("request_format") if isinstance(backend.get("request_format"), str) else None,
            started_unix_s=bf.number("start_time", required=False, minimum=None),
            requests=requests,
            notes=["no per-token times in guidellm's report: stalls cannot run on this run, ITL "
                   "is not recomputed (TTFT, TPOT and e2e are)",
                   "the command line is not in guidellm's report (its settings are)"]))
    if not runs:
        raise BadFile(path, "whole file", "benchmarks", "empty: the report holds no benchmark")
    return runs
