"""The same engine state under SGLang's metric names and bucket edges (`--metrics-names sglang`).

Names, types and default buckets as SGLang's `python/sglang/srt/metrics/collector.py`
declares them (`SchedulerMetricsCollector` gauges, `TokenizerMetricsCollector` counters and
histograms, `queue_time_seconds`): a dashboard or a pull built for SGLang finds here what it
finds on an SGLang server, so both name sets are tested against one engine. What SGLang
computes per logging interval (`gen_throughput`, `cache_hit_rate`) is computed here between
scrapes, from the same counters the vLLM names expose.
"""

from __future__ import annotations

import time

from reference_engine.metrics import (
    EngineStatsLike,
    Histogram,
    MemoryGauges,
    RequestMetrics,
    _family,
    _memory_lines,
)

# SGLang's default bucket edges (TokenizerMetricsCollector, scheduler queue time).
TTFT_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
)
ITL_BUCKETS: tuple[float, ...] = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
    0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)
E2E_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200,
    1800, 2400,
)
QUEUE_BUCKETS: tuple[float, ...] = (
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
    400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)


class SglangRequestMetrics(RequestMetrics):
    """The server observes into these exactly as into vLLM's; only names and edges differ.

    Ownership: used on the server's event loop thread only (scrapes and observations), so
    the throughput window needs no lock."""

    def __init__(self) -> None:
        super().__init__()
        self.time_to_first_token = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.inter_token_latency = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e_request_latency = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds", E2E_BUCKETS)
        self.request_queue_time = Histogram(
            "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", QUEUE_BUCKETS)
        # (monotonic s, generation tokens, prefix queries, prefix hits) at the last scrape.
        self._last: tuple[float, int, int, int] | None = None

    def interval_rates(self, stats: EngineStatsLike) -> tuple[float, float]:
        """(generated tokens/s, prefix-cache hit rate) since the previous scrape."""
        now = time.monotonic()
        cur = (now, stats.generation_tokens_total, stats.prefix_cache_queries,
               stats.prefix_cache_hits)
        last, self._last = self._last, cur
        if last is None or now <= last[0]:
            return 0.0, 0.0
        throughput = (cur[1] - last[1]) / (now - last[0])
        queries = cur[2] - last[2]
        return throughput, ((cur[3] - last[3]) / queries if queries > 0 else 0.0)


def render(stats: EngineStatsLike, requests: SglangRequestMetrics, model_name: str,
           memory: MemoryGauges | None = None) -> str:
    """The exposition under SGLang's names, ending with a newline as the format requires."""
    labels = [("model_name", model_name)]
    block = memory.block_size if memory is not None else 0
    used_blocks = getattr(stats, "kv_blocks_used", 0)
    total_blocks = getattr(stats, "kv_blocks_total", 0)
    throughput, hit_rate = requests.interval_rates(stats)
    finished = sum(n for r, n in requests.request_success.items() if r != "abort")
    # The memory ledger's series, less vLLM's cache_config_info (SGLang has no such info
    # series): a dashboard keyed on `vllm:` must find nothing on an SGLang-named engine.
    lines = [ln for ln in (_memory_lines(memory, labels) if memory is not None else [])
             if "vllm:" not in ln]
    for name, kind, doc, value in (
        ("sglang:num_running_reqs", "gauge", "The number of running requests.", stats.num_running),
        ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
         stats.num_waiting),
        ("sglang:token_usage", "gauge", "The token usage.", stats.kv_usage),
        ("sglang:num_used_tokens", "gauge", "The number of used tokens.", used_blocks * block),
        ("sglang:max_total_num_tokens", "gauge",
         "Maximum total number of tokens in the KV cache pool.", total_blocks * block),
        ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", hit_rate),
        ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", throughput),
        ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         stats.prompt_tokens_total),
        ("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
         stats.generation_tokens_total),
        ("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.",
         stats.prefix_cache_hits),
        ("sglang:num_requests_total", "counter", "Number of requests processed.", finished),
        ("sglang:num_aborted_requests_total", "counter", "Number of requests aborted.",
         requests.request_success.get("abort", 0)),
        # Recompute preemption is what SGLang calls retraction.
        ("sglang:num_retracted_requests_total", "counter", "Total number of retracted requests.",
         stats.num_preemptions),
    ):
        lines += _family(name, kind, doc, labels, value)
    for hist in requests.histograms():
        lines += hist.render(labels)
    return "\n".join(lines) + "\n"
