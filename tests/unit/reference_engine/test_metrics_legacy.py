"""/metrics under the names vLLM used before its renames (`--metrics-names vllm-legacy`):
only the old names, and otherwise the current exposition line for line."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from reference_engine import metrics as prom
from reference_engine import metrics_legacy as legacy
from reference_engine.config import EngineConfig


@dataclass
class Stats:
    num_running: int = 2
    num_waiting: int = 1
    kv_usage: float = 0.625
    prefix_cache_queries: int = 800
    prefix_cache_hits: int = 300
    num_preemptions: int = 4
    prompt_tokens_total: int = 900
    generation_tokens_total: int = 120


def _observed(req: prom.RequestMetrics) -> prom.RequestMetrics:
    for v in (0.004, 0.02, 0.3):
        req.time_to_first_token.observe(v)
        req.inter_token_latency.observe(v / 4)
    return req


def test_only_the_old_names_with_the_same_values() -> None:
    old = legacy.render_legacy(Stats(), _observed(legacy.LegacyRequestMetrics()), "m")
    new = prom.render(Stats(), _observed(prom.RequestMetrics()), "m")
    kinds = {f.name: f.type for f in text_string_to_metric_families(old)}
    assert kinds["vllm:gpu_cache_usage_perc"] == "gauge"
    assert kinds["vllm:gpu_prefix_cache_queries"] == kinds["vllm:gpu_prefix_cache_hits"] == "counter"
    assert kinds["vllm:time_per_output_token_seconds"] == "histogram"
    for gone in ("vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
                 "vllm:inter_token_latency_seconds"):
        assert gone not in kinds and gone + "{" not in old
    assert "vllm:gpu_gpu_" not in old
    # Renaming back gives the current exposition exactly (values, labels, buckets, order).
    back = old.replace("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds")
    back = back.replace("Histogram of time per output token in seconds.",
                        "Histogram of inter-token latency in seconds.")
    for new_name, old_name in legacy.RENAMES:
        back = back.replace(old_name, new_name)
    assert back == new


def test_config_takes_the_legacy_names() -> None:
    assert EngineConfig(metrics_names="vllm-legacy").metrics_names == "vllm-legacy"
