"""`vllm bench serve --save-result --save-detailed` JSON (vllm/benchmarks/serve.py).

One file is one run: the settings at the top (`backend`, `model_id`, `num_prompts`,
`request_rate`, `burstiness`, `max_concurrency`, `--metadata` pairs), the aggregate metrics
(`mean_ttft_ms`, `p99_itl_ms`, ... for the `--metric-percentiles` asked for), and with
`--save-detailed` one entry per request in parallel lists: `start_times` (perf_counter
seconds), `ttfts`, `itls` (list per request), `latencies`, `input_lens`, `output_lens`,
`errors`. Without `--save-detailed` there are no per-request lists and nothing to import.

What the lists mean (vLLM's request function): TTFT ends at the first SSE event that carries
`choices`; each ITL is the gap between consecutive such events (per event, never spread over
tokens); the latency ends at the last such event, not at usage or `[DONE]`; `input_lens`
holds the server's `usage.prompt_tokens` where it sent usage; a failed request has a
non-empty `errors` entry (or no latency at all), TTFT 0 and no ITLs, and is left out of
every latency statistic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infbench.imports.model import BadFile, Fields, ImportedRequest, ImportedRun, load_json, ns
from infbench.imports.redaction import redact

TOOL = "vllm-bench"
# Per-request lists `--save-detailed` writes; one entry per request, in the same order.
_LISTS = ("start_times", "ttfts", "itls", "latencies", "input_lens", "output_lens", "errors")
# Top-level keys that are settings, not results.
_SETTINGS = ("date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts",
             "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy",
             "ramp_up_start_rps", "ramp_up_end_rps")
_SUMMARY_PREFIXES = ("mean_", "median_", "std_", "p")


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: doc[k] for k in ("duration", "completed", "failed", "total_input_tokens",
                               "total_output_tokens", "request_throughput", "output_throughput",
                               "total_token_throughput", "request_goodput") if k in doc}
    for k, v in doc.items():
        if k.endswith("_ms") and k.startswith(_SUMMARY_PREFIXES) and isinstance(v, int | float):
            out[k] = v
    return out


def read(path: Path) -> list[ImportedRun]:
    doc = load_json(path)
    top = Fields(path, "whole file", doc)
    if "start_times" not in doc and "ttfts" not in doc:
        if "completed" in doc and "mean_ttft_ms" in doc:
            raise top.bad("ttfts", "missing: the file has only the aggregate metrics (rerun "
                                   "`vllm bench serve` with --save-detailed)")
        raise top.bad("ttfts", "missing: not a `vllm bench serve --save-result` file")
    lists = {name: top.array(name) for name in _LISTS}
    n = len(lists["ttfts"])
    for name, values in lists.items():
        if len(values) != n:
            raise top.bad(name, f"{len(values)} entries where ttfts has {n}")
    requests = [_request(path, i, {k: v[i] for k, v in lists.items()}) for i in range(n)]
    settings = {k: doc[k] for k in _SETTINGS if k in doc}
    # `--metadata KEY=VALUE` pairs land at the top level too: strings that are no known key.
    known = set(_SETTINGS) | set(_LISTS) | set(_summary(doc))
    settings["metadata"] = {k: v for k, v in doc.items() if k not in known and isinstance(v, str)}
    notes = ["vllm bench serve records no intended send times (the arrival schedule): the "
             "workload fingerprint is built from lengths only"]
    return [ImportedRun(
        tool=TOOL, source=str(path), record="whole file",
        tool_version=None,
        command=None,
        tool_config=redact(settings),
        tool_summary=_summary(doc),
        model=top.text("model_id", required=False),
        target_url=None,
        endpoint=top.text("backend", required=False),
        started_unix_s=None,
        requests=requests,
        notes=notes,
    )]


def _request(path: Path, i: int, row: dict[str, Any]) -> ImportedRequest:
    f = Fields(path, f"request {i}", row)
    error = f.text("errors", required=False) if row["errors"] is not None else None
    latency = f.number("latencies")
    gaps = f.array("itls") or []
    for j, g in enumerate(gaps):
        if isinstance(g, bool) or not isinstance(g, int | float) or g < 0:
            raise f.bad(f"itls[{j}]", f"expected a gap in seconds >= 0, got {g!r}")
    # A non-200 answer with an empty reason leaves `errors` empty, but no latency was taken.
    failed = bool(error) or latency == 0.0
    return ImportedRequest(
        send_ns=ns(f.number("start_times", minimum=None)),
        ttft_s=None if failed else f.number("ttfts"),
        e2e_s=None if failed else latency,
        input_tokens=f.integer("input_lens"),
        output_tokens=None if failed else f.integer("output_lens"),
        token_gaps_s=None if failed else tuple(float(g) for g in gaps),
        error=(error or "failed without an error text") if failed else None,
    )


# How vLLM defines what it reports, recorded with every imported run (docs/imports.md).
DEFINITIONS = {
    "ttft": "send to the first SSE event carrying choices (text may be empty)",
    "itl": "gap between consecutive events carrying choices, per event (raw_*_itl_ms)",
    "tpot": "(latency - ttft) / (output tokens - 1), requests with more than one output token",
    "e2e": "send to the last event carrying choices (not usage or [DONE])",
    "output_tokens": "usage.completion_tokens, else the generated text re-tokenized",
    "input_tokens": "usage.prompt_tokens where the server sent usage, else the dataset's count",
    "failed": "non-200 answer, exception, or no event with choices; left out of every latency",
    "duration": "from before the first request to after the last answer (benchmark wall time)",
}
# Reported numbers whose definitions differ from infbench's, and why (not compared).
DIFFERENCES = {
    "duration": "vLLM times the whole benchmark call; infbench's duration runs from the first "
                "send to the last answer, so it is shorter by the start-up and the tail",
    "request_throughput": "divided by vLLM's duration (see duration)",
    "output_throughput": "divided by vLLM's duration (see duration)",
    "total_token_throughput": "divided by vLLM's duration (see duration)",
}

# vLLM's aggregate keys and the infbench summary keys that mean the same, where they do.
SUMMARY_MAP: dict[str, str] = {
    "completed": "completed", "failed": "failed",
    "total_input_tokens": "total_input_tokens", "total_output_tokens": "total_output_tokens",
    **{f"{s}_{m}_ms": f"{s}_{m}_ms" for s in ("mean", "median", "std") for m in ("ttft", "tpot", "e2el")},
    **{f"{s}_itl_ms": f"raw_{s}_itl_ms" for s in ("mean", "median", "std")},
}


def summary_pairs(tool_summary: dict[str, Any]) -> dict[str, str]:
    """Tool key -> infbench key for every number the file has a counterpart for, the
    percentiles (`p99_ttft_ms`, `p99.9_itl_ms`) included."""
    out = {k: v for k, v in SUMMARY_MAP.items() if k in tool_summary}
    for k in tool_summary:
        if k.startswith("p") and k.endswith("_ms") and k[1].isdigit():
            metric = k.split("_", 1)[1]
            out[k] = f"raw_{k}" if metric == "itl_ms" else k
    return out


__all__ = ["DEFINITIONS", "DIFFERENCES", "TOOL", "BadFile", "read", "summary_pairs"]
