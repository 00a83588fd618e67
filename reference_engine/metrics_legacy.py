"""The vLLM exposition under the names vLLM used before its renames (`--metrics-names
vllm-legacy`), so readers that must cope with either generation are tested against both.

vLLM 0.9 deprecated `vllm:gpu_cache_usage_perc` and `vllm:gpu_prefix_cache_{queries,hits}`
for `vllm:kv_cache_usage_perc` and `vllm:prefix_cache_*` (removed later, PR #29330), and
0.11 renamed the per-token latency histogram `vllm:time_per_output_token_seconds` to
`vllm:inter_token_latency_seconds` (removed in PR #32661). A server from before those
releases exposes only the old names; that is what this gives. Types, labels, buckets and
values are the current exposition's.
"""

from __future__ import annotations

from reference_engine.metrics import (
    ITL_BUCKETS,
    EngineStatsLike,
    Histogram,
    MemoryGauges,
    RequestMetrics,
    render,
)

# Current name -> the name before the rename (a prefix for the counter families).
RENAMES: tuple[tuple[str, str], ...] = (
    ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
)


class LegacyRequestMetrics(RequestMetrics):
    def __init__(self) -> None:
        super().__init__()
        self.inter_token_latency = Histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.", ITL_BUCKETS)


def render_legacy(stats: EngineStatsLike, requests: LegacyRequestMetrics, model_name: str,
                  memory: MemoryGauges | None = None) -> str:
    """The current exposition with the renamed families under their old names."""
    lines = render(stats, requests, model_name, memory).split("\n")
    out = []
    for line in lines:
        for new, old in RENAMES:
            # A family name ends at `_total`, `{`, a space or the line's end; match whole names
            # only (`vllm:prefix_cache_hits` must not touch `vllm:gpu_prefix_cache_hits`).
            for tail in ("_total{", "_total ", "{", " "):
                line = line.replace(new + tail, old + tail)
        out.append(line)
    return "\n".join(out)
