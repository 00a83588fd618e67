"""The memory ledger of a run: one `memory_samples` row per scrape of the target's `/metrics`.

Every series is already kept in `metric_samples`; this picks out the ones that say where
memory goes, under each engine's own names, into fixed columns a playbook can regress on
without knowing which engine it was:

| column | vLLM | SGLang | reference engine |
| --- | --- | --- | --- |
| kv_usage | `vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc` before 0.10) | `sglang:token_usage` | as vLLM |
| kv_blocks_total | `vllm:cache_config_info{num_gpu_blocks=..}` | `sglang:max_total_num_tokens` (a page is one token) | as vLLM |
| kv_blocks_used | kv_usage x total | `sglang:num_used_tokens` | as vLLM |
| num_running / num_waiting | `vllm:num_requests_running` / `_waiting` | `sglang:num_running_reqs` / `num_queue_reqs` | as vLLM |
| preemptions_total | `vllm:num_preemptions_total` | `sglang:num_retracted_reqs_total` | as vLLM |
| requests_finished_total | `vllm:request_success_total` (every reason) | `sglang:e2e_request_latency_seconds_count` | as vLLM |
| process_rss_bytes | `process_resident_memory_bytes` (prometheus_client's process collector) | same | same |
| allocator_*_bytes | - | - | `reference_engine_torch_allocated_bytes` / `_reserved_bytes` |

Series with several label sets (data-parallel engines, several models) are summed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_SUM: dict[str, tuple[str, ...]] = {
    "kv_usage_vllm": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "kv_usage_sglang": ("sglang:token_usage",),
    "num_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "num_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "preemptions_total": ("vllm:num_preemptions_total", "vllm:num_preemptions",
                          "sglang:num_retracted_reqs_total", "sglang:num_retracted_reqs"),
    "requests_finished_total": ("vllm:request_success_total",
                                "sglang:e2e_request_latency_seconds_count"),
    "process_rss_bytes": ("process_resident_memory_bytes",),
    "allocator_allocated_bytes": ("reference_engine_torch_allocated_bytes",),
    "allocator_reserved_bytes": ("reference_engine_torch_reserved_bytes",),
    "sglang_total": ("sglang:max_total_num_tokens",),
    "sglang_used": ("sglang:num_used_tokens",),
}
_BY_NAME = {name: key for key, names in _SUM.items() for name in names}
_NUM_GPU_BLOCKS = re.compile(r'(?:^|,)\s*num_gpu_blocks="(\d+)"')
_INT_COLUMNS = ("num_running", "num_waiting", "preemptions_total", "requests_finished_total",
                "process_rss_bytes", "allocator_allocated_bytes", "allocator_reserved_bytes")


def memory_row(cols: Mapping[str, Sequence[Any]]) -> dict[str, Any] | None:
    """The memory row of one scrape given as metric_samples columns (t_ns, name, labels,
    value), or None when the scrape had none of these series."""
    names, labels, values = cols["name"], cols["labels"], cols["value"]
    # A dcgm-exporter is a process of its own: its process_* series are not the engine's.
    if not names or (cols.get("source") or [None])[0] == "dcgm":
        return None
    found: dict[str, float] = {}
    first_name: dict[str, str] = {}
    blocks_total = 0
    have_blocks = False
    for name, lab, value in zip(names, labels, values, strict=True):
        if name == "vllm:cache_config_info":
            m = _NUM_GPU_BLOCKS.search(lab or "")
            if m:
                blocks_total += int(m.group(1))
                have_blocks = True
            continue
        key = _BY_NAME.get(name)
        if key is None:
            continue
        # A series exposed under two names (a deprecated alias beside its new name) counts
        # once: the first name seen for a column wins.
        if first_name.setdefault(key, name) != name:
            continue
        found[key] = found.get(key, 0.0) + float(value)
    if not found and not have_blocks:
        return None
    row: dict[str, Any] = {"t_ns": int(cols["t_ns"][0]), "source": "metrics",
                           "replica": (cols.get("replica") or [None])[0]}
    for key in _INT_COLUMNS:
        row[key] = int(round(found[key])) if key in found else None
    if "kv_usage_vllm" in found:
        # Summed over engines a usage fraction is meaningless: average it instead.
        n = sum(1 for name in names if name == first_name["kv_usage_vllm"])
        row["kv_usage"] = found["kv_usage_vllm"] / max(1, n)
        row["kv_blocks_total"] = blocks_total if have_blocks else None
        row["kv_blocks_used"] = (int(round(row["kv_usage"] * blocks_total))
                                 if have_blocks else None)
    elif "kv_usage_sglang" in found or "sglang_total" in found:
        total = found.get("sglang_total")
        used = found.get("sglang_used")
        row["kv_blocks_total"] = int(total) if total is not None else None
        row["kv_blocks_used"] = int(used) if used is not None else None
        n = sum(1 for name in names if name == "sglang:token_usage")
        row["kv_usage"] = found["kv_usage_sglang"] / max(1, n) if n else (
            used / total if used is not None and total else None)
    else:
        row["kv_usage"] = None
        row["kv_blocks_total"] = blocks_total if have_blocks else None
        row["kv_blocks_used"] = None
    return row
