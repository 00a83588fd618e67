"""SGLang `bench_serving --output-file F --output-details` JSON Lines
(sglang/benchmark/serving.py; `python -m sglang.bench_serving`).

Each line is one benchmark (the file is appended to): the settings (`backend`,
`dataset_name`, `request_rate`, `max_concurrency`, `random_input_len`, ...), the aggregate
(`duration`, `completed`, `mean_ttft_ms`, `p99_itl_ms`, `mean_e2e_latency_ms`, ...) and with
`--output-details` per-request lists: `input_lens`, `output_lens`, `ttfts`, `itls`,
`generated_texts`, `errors`. The details keep no send time and no latency per request.

SGLang's request function (OpenAI completions): TTFT ends at the first event whose text is
not empty; each ITL is the gap between consecutive such events (per event); the latency runs
to the last line of the stream (`[DONE]` included) and TPOT = (latency - TTFT) /
(output_len - 1); `output_len` is usage.completion_tokens where the server sent usage, else
the length asked for; `input_lens` the server's prompt count where it sent one, else the
dataset's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infbench.imports.model import BadFile, Fields, ImportedRequest, ImportedRun, load_jsonl
from infbench.imports.redaction import redact

TOOL = "sglang-bench"
_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "errors")
_SETTINGS = ("tag", "backend", "dataset_name", "request_rate", "max_concurrency",
             "sharegpt_output_len", "random_input_len", "random_output_len", "random_range_ratio",
             "server_info")

DEFINITIONS = {
    "ttft": "send to the first event whose text is not empty",
    "itl": "gap between consecutive events with text, per event (raw_*_itl_ms)",
    "tpot": "(latency - TTFT) / (output_len - 1), latency to the end of the stream",
    "e2e": "latency: send to the last line of the stream ([DONE] included); not in the details",
    "output_tokens": "usage.completion_tokens where sent, else the length asked for",
    "input_tokens": "the server's prompt count where it sent one, else the dataset's count",
    "failed": "an `errors` entry that is not empty; left out of every latency",
    "duration": "the whole benchmark call",
    "schedule": "not recorded; nor are send times",
}
DIFFERENCES = {
    **{f"{s}_e2e_latency_ms": "SGLang's latency runs to [DONE] and is not in the details; "
                              "infbench's e2e ends at the last token (TTFT + the ITLs)"
       for s in ("mean", "median", "std", "p90", "p95", "p99")},
    **{f"{s}_tpot_ms": "divides SGLang's latency (to [DONE]), which the details do not keep"
       for s in ("mean", "median", "std", "p90", "p95", "p99")},
    "duration": "the details keep no send times: infbench cannot place the requests in time",
    "request_throughput": "divided by SGLang's duration (see duration)",
    "output_throughput": "divided by SGLang's duration (see duration)",
}
_SUMMARY_STATS = ("mean", "median", "std", "p90", "p95", "p99")


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    keys = ("duration", "completed", "total_input_tokens", "total_output_tokens",
            "request_throughput", "output_throughput", "max_itl_ms")
    out = {k: doc[k] for k in keys if isinstance(doc.get(k), int | float)}
    for m in ("ttft", "itl", "tpot", "e2e_latency"):
        for s in _SUMMARY_STATS:
            v = doc.get(f"{s}_{m}_ms")
            if isinstance(v, int | float):
                out[f"{s}_{m}_ms"] = v
    return out


def summary_pairs(tool_summary: dict[str, Any]) -> dict[str, str]:
    pairs = {"completed": "completed", "total_input_tokens": "total_input_tokens",
             "total_output_tokens": "total_output_tokens", "max_itl_ms": "raw_max_itl_ms"}
    for s in _SUMMARY_STATS:
        pairs[f"{s}_ttft_ms"] = f"{s}_ttft_ms"
        pairs[f"{s}_itl_ms"] = f"raw_{s}_itl_ms"
    return {k: v for k, v in pairs.items() if k in tool_summary}


def _request(path: Path, record: str, i: int, row: dict[str, Any]) -> ImportedRequest:
    f = Fields(path, f"{record}: request {i}", row)
    error = f.text("errors", required=False) if row["errors"] is not None else None
    gaps = f.array("itls") or []
    for j, g in enumerate(gaps):
        if isinstance(g, bool) or not isinstance(g, int | float) or g < 0:
            raise f.bad(f"itls[{j}]", f"expected a gap in seconds >= 0, got {g!r}")
    ttft = None if error else f.number("ttfts")
    return ImportedRequest(
        # No send times in the file: every request starts at 0 on the run's axis, so TTFT,
        # ITL and the last token are right, and the timeline across requests is not.
        send_ns=0, ttft_s=ttft,
        e2e_s=None if ttft is None else ttft + sum(float(g) for g in gaps),
        input_tokens=f.integer("input_lens"),
        output_tokens=None if error else f.integer("output_lens"),
        token_gaps_s=None if error else tuple(float(g) for g in gaps),
        error=error or None)


def read(path: Path) -> list[ImportedRun]:
    runs = []
    for line, doc in load_jsonl(path):
        record = f"line {line}"
        top = Fields(path, record, doc)
        if "ttfts" not in doc:
            if "mean_ttft_ms" in doc:
                raise top.bad("ttfts", "missing: the line has only the aggregate (rerun "
                                       "bench_serving with --output-details)")
            raise top.bad("ttfts", "missing: not an SGLang bench_serving result line")
        lists = {name: top.array(name) for name in _LISTS}
        n = len(lists["ttfts"] or [])
        for name, values in lists.items():
            if len(values or []) != n:
                raise top.bad(name, f"{len(values or [])} entries where ttfts has {n}")
        requests = [_request(path, record, i, {k: v[i] for k, v in lists.items()})
                    for i in range(n)]
        runs.append(ImportedRun(
            tool=TOOL, source=str(path), record=record, tool_version=None, command=None,
            tool_config=redact({k: doc[k] for k in _SETTINGS if k in doc}),
            tool_summary=_summary(doc), model=None, target_url=None,
            endpoint=doc.get("backend") if isinstance(doc.get("backend"), str) else None,
            started_unix_s=None, requests=requests,
            notes=["SGLang's details keep no send times, latencies or schedule: every request "
                   "is placed at t=0, so duration, throughput and the timeline across requests "
                   "are not meaningful (TTFT, ITL and TPOT to the last token are)",
                   "no SGLang version or command line in the file"]))
    if not runs:
        raise BadFile(path, "whole file", "(records)", "empty: no result line")
    return runs
