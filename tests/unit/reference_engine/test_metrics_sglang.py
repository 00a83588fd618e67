"""/metrics under SGLang's names (`--metrics-names sglang`): the names, types and bucket
edges SGLang's collector.py declares, the numbers of the same engine state, interval rates."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from reference_engine import metrics as prom
from reference_engine import metrics_sglang as sg
from reference_engine.config import ConfigError, EngineConfig


@dataclass
class Stats:
    num_running: int = 5
    num_waiting: int = 7
    kv_usage: float = 0.375
    kv_blocks_used: int = 30
    kv_blocks_total: int = 80
    prefix_cache_queries: int = 1000
    prefix_cache_hits: int = 250
    num_preemptions: int = 3
    prompt_tokens_total: int = 4000
    generation_tokens_total: int = 900


def _memory() -> prom.MemoryGauges:
    return prom.MemoryGauges(rss_bytes=None, num_gpu_blocks=80, block_size=16, components={},
                             allocator={})


def _families(text: str) -> dict[str, object]:
    from prometheus_client.parser import text_string_to_metric_families
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_names_and_types_are_sglangs() -> None:
    fams = _families(sg.render(Stats(), sg.SglangRequestMetrics(), "qwen", _memory()))
    kinds = {name: f.type for name, f in fams.items() if name.startswith("sglang:")}
    assert kinds == {
        "sglang:num_running_reqs": "gauge", "sglang:num_queue_reqs": "gauge",
        "sglang:token_usage": "gauge", "sglang:num_used_tokens": "gauge",
        "sglang:max_total_num_tokens": "gauge", "sglang:cache_hit_rate": "gauge",
        "sglang:gen_throughput": "gauge",
        # prometheus_client's parser names a counter family without `_total`
        "sglang:prompt_tokens": "counter", "sglang:generation_tokens": "counter",
        "sglang:cached_tokens": "counter", "sglang:num_requests": "counter",
        "sglang:num_aborted_requests": "counter", "sglang:num_retracted_requests": "counter",
        "sglang:time_to_first_token_seconds": "histogram",
        "sglang:inter_token_latency_seconds": "histogram",
        "sglang:e2e_request_latency_seconds": "histogram",
        "sglang:queue_time_seconds": "histogram",
    }
    assert not any(name.startswith("vllm:") for name in fams)


def test_values_follow_the_engine_state_and_buckets_are_sglangs() -> None:
    req = sg.SglangRequestMetrics()
    for v in (0.05, 0.15, 0.15, 3.0, 500.0):
        req.time_to_first_token.observe(v)
    req.request_success["stop"] += 3
    req.request_success["length"] += 1
    req.request_success["abort"] += 2
    fams = _families(sg.render(Stats(), req, "qwen", _memory()))

    def one(name: str, suffix: str = "") -> float:
        (s,) = [s for s in fams[name].samples if s.name == name + suffix]
        assert s.labels["model_name"] == "qwen"
        return s.value

    assert one("sglang:num_running_reqs") == 5 and one("sglang:num_queue_reqs") == 7
    assert one("sglang:token_usage") == 0.375
    assert one("sglang:num_used_tokens") == 30 * 16 and one("sglang:max_total_num_tokens") == 80 * 16
    assert one("sglang:cached_tokens", "_total") == 250
    assert one("sglang:num_requests", "_total") == 4  # finished, aborts apart
    assert one("sglang:num_aborted_requests", "_total") == 2
    assert one("sglang:num_retracted_requests", "_total") == 3
    buckets = [(s.labels["le"], s.value) for s in fams["sglang:time_to_first_token_seconds"].samples
               if s.name.endswith("_bucket")]
    assert [float(le) for le, _ in buckets[:-1]] == list(sg.TTFT_BUCKETS)
    got = dict(buckets)
    assert got["0.1"] == 1 and got["0.2"] == 3 and got["4.0"] == 4 and got["400.0"] == 4
    assert got["+Inf"] == 5


def test_throughput_and_hit_rate_are_per_scrape_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 102.0, 103.0])
    monkeypatch.setattr(sg.time, "monotonic", lambda: next(clock))
    req = sg.SglangRequestMetrics()
    assert req.interval_rates(Stats()) == (0.0, 0.0)  # no interval yet
    later = Stats(generation_tokens_total=900 + 640, prefix_cache_queries=1000 + 400,
                  prefix_cache_hits=250 + 300)
    assert req.interval_rates(later) == (320.0, 0.75)
    assert req.interval_rates(later) == (0.0, 0.0)  # nothing happened in that second


def test_config_accepts_only_the_two_name_sets() -> None:
    assert EngineConfig(metrics_names="sglang").metrics_names == "sglang"
    with pytest.raises(ConfigError, match="metrics_names"):
        EngineConfig(metrics_names="tgi")
