"""Which Prometheus series a run pulls, and the names one meaning has had across versions.

Families are pulled whole by a `__name__` regex, so every name a server version exposes
comes along (a vLLM 0.9 server's `vllm:gpu_cache_usage_perc` as well as a 0.11 server's
`vllm:kv_cache_usage_perc`); `VARIANTS` then says which stored names mean the same thing, so
a reader asks for "kv_usage" and finds whichever this server had. Names are from vLLM's
`vllm/v1/metrics/loggers.py`, SGLang's `python/sglang/srt/metrics/collector.py`,
dcgm-exporter's `etc/default-counters.csv` and node_exporter.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    match: str        # regex on __name__ (Prometheus anchors it)
    scope: str        # "target": the engine's own series; "host": its machine's (GPU, node)


# node_exporter's series the playbooks reason about (CPU saturation, memory, network): the
# rest of its ~1,000 series per host would only fill the store.
_NODE = ("node_cpu_seconds_total|node_load1|node_memory_MemAvailable_bytes|"
         "node_memory_MemTotal_bytes|node_network_receive_bytes_total|"
         "node_network_transmit_bytes_total|node_disk_io_time_seconds_total|"
         "node_pressure_cpu_waiting_seconds_total")

FAMILIES: tuple[Family, ...] = (
    Family("vllm", "vllm:.+", "target"),
    Family("sglang", "sglang:.+", "target"),
    Family("dcgm", "DCGM_.+", "host"),
    Family("node", _NODE, "host"),
)

# One meaning -> the names servers gave it, newest first. Histograms are named by family
# (the stored rows are `<name>_bucket`, `_sum`, `_count`).
VARIANTS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    # vLLM renamed TPOT to ITL in 0.11 (the old name hidden in 0.12, removed later).
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "queue_time": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    # 0..1; vLLM 0.9 deprecated gpu_cache_usage_perc for kv_cache_usage_perc.
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",
                             "vllm:gpu_prefix_cache_queries_total"),
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK",),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE",),
    "dram_active": ("DCGM_FI_PROF_DRAM_ACTIVE",),
    # Field 112; DCGM 3.3+ names it CLOCKS_EVENT_REASONS (earlier CLOCK_THROTTLE_REASONS).
    "clock_event_reasons": ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    "xid": ("DCGM_FI_DEV_XID_ERRORS",),
}


def family_of(name: str) -> str | None:
    """The family a stored series name belongs to (by prefix), or None."""
    if name.startswith("vllm:"):
        return "vllm"
    if name.startswith("sglang:"):
        return "sglang"
    if name.startswith("DCGM_"):
        return "dcgm"
    if name.startswith("node_"):
        return "node"
    return None
