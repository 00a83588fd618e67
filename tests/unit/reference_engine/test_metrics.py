"""The /metrics exposition: vLLM's names and types, valid Prometheus text, right numbers."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pytest

from reference_engine import metrics as prom

SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Stats:
    num_running: int = 3
    num_waiting: int = 2
    kv_usage: float = 0.25
    prefix_cache_queries: int = 640
    prefix_cache_hits: int = 480
    num_preemptions: int = 1
    prompt_tokens_total: int = 1000
    generation_tokens_total: int = 250


def parse(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """A strict reader of the text format: TYPE lines and samples, nothing else allowed."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"duplicate TYPE for {name}"
            types[name] = kind
        elif line.startswith("# HELP "):
            continue
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            labels = dict(LABEL.findall(m["labels"] or ""))
            value = m["value"]
            samples.append((m["name"], labels, math.inf if value == "+Inf" else float(value)))
    return types, samples


def value(samples, name: str, **labels: str) -> float:
    hits = [v for n, lab, v in samples if n == name and all(lab.get(k) == w
                                                            for k, w in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0]


def test_vllm_names_types_and_values_from_engine_stats() -> None:
    types, samples = parse(prom.render(Stats(), prom.RequestMetrics(), "llama"))
    expected_types = {
        "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge", "vllm:prefix_cache_queries_total": "counter",
        "vllm:prefix_cache_hits_total": "counter", "vllm:num_preemptions_total": "counter",
        "vllm:prompt_tokens_total": "counter", "vllm:generation_tokens_total": "counter",
        "vllm:request_success_total": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
    }
    assert {k: types.get(k) for k in expected_types} == expected_types
    assert value(samples, "vllm:num_requests_running", model_name="llama") == 3
    assert value(samples, "vllm:num_requests_waiting") == 2
    assert value(samples, "vllm:kv_cache_usage_perc") == 0.25
    # Counters: TYPE line and sample both say _total, as prometheus_client writes them.
    assert value(samples, "vllm:prefix_cache_queries_total") == 640
    assert value(samples, "vllm:prefix_cache_hits_total") == 480
    assert value(samples, "vllm:num_preemptions_total") == 1
    assert value(samples, "vllm:prompt_tokens_total") == 1000
    assert value(samples, "vllm:generation_tokens_total") == 250
    # Every sample carries the model_name label.
    assert all(lab.get("model_name") == "llama" for _, lab, _ in samples)


def test_histogram_buckets_are_cumulative_and_le_is_inclusive() -> None:
    requests = prom.RequestMetrics()
    for ttft in (0.001, 0.003, 0.1, 0.1, 3000.0):
        requests.time_to_first_token.observe(ttft)
    _, samples = parse(prom.render(Stats(), requests, "m"))
    name = "vllm:time_to_first_token_seconds"
    assert value(samples, f"{name}_bucket", le="0.001") == 1   # a value on a bound counts
    assert value(samples, f"{name}_bucket", le="0.005") == 2
    assert value(samples, f"{name}_bucket", le="0.1") == 4
    assert value(samples, f"{name}_bucket", le="2560.0") == 4
    assert value(samples, f"{name}_bucket", le="+Inf") == 5    # the overflow bucket
    assert value(samples, f"{name}_count") == 5
    assert value(samples, f"{name}_sum") == pytest.approx(3000.204)
    buckets = [v for n, lab, v in samples if n == f"{name}_bucket"]
    assert buckets == sorted(buckets)
    assert len(buckets) == len(prom.TTFT_BUCKETS) + 1


def test_request_success_counts_by_finished_reason() -> None:
    requests = prom.RequestMetrics()
    requests.request_success["length"] += 2
    requests.request_success["abort"] += 1
    _, samples = parse(prom.render(Stats(), requests, "m"))
    assert value(samples, "vllm:request_success_total", finished_reason="length") == 2
    assert value(samples, "vllm:request_success_total", finished_reason="abort") == 1
    assert value(samples, "vllm:request_success_total", finished_reason="stop") == 0


def test_model_name_label_is_escaped() -> None:
    _, samples = parse(prom.render(Stats(), prom.RequestMetrics(), 'a"b\\c\nd'))
    raw = {lab["model_name"] for _, lab, _ in samples}
    assert raw == {'a\\"b\\\\c\\nd'}


def test_histogram_rejects_unsorted_buckets_and_ignores_nan() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        prom.Histogram("x", "x", [0.2, 0.1])
    hist = prom.Histogram("x", "x", [1.0])
    hist.observe(math.nan)
    assert hist.count == 0


def _busy_requests() -> prom.RequestMetrics:
    requests = prom.RequestMetrics()
    for v in (0.002, 0.04, 0.7):
        requests.time_to_first_token.observe(v)
        requests.inter_token_latency.observe(v / 10)
        requests.e2e_request_latency.observe(v * 30)
        requests.request_queue_time.observe(v / 2)
    requests.request_success["stop"] += 4
    return requests


def test_official_parser_types_every_family_as_prometheus_client_would() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    ours = {f.name: f.type for f in text_string_to_metric_families(
        prom.render(Stats(), _busy_requests(), "m"))}
    assert "unknown" not in ours.values(), ours
    # The reference: what prometheus_client itself writes for the same names and kinds.
    reg = CollectorRegistry()
    for fam in prom._ENGINE_FAMILIES:
        kind = Counter if fam.kind == "counter" else Gauge
        kind(fam.name, fam.documentation, ["model_name"], registry=reg).labels("m")
    Counter("vllm:request_success", "x", ["model_name", "finished_reason"], registry=reg)
    theirs = {f.name: f.type for f in text_string_to_metric_families(generate_latest(reg).decode())
              if not f.name.endswith("_created")}
    assert {k: ours[k] for k in theirs} == theirs
    assert sum(t == "counter" for t in ours.values()) == 6
    assert sum(t == "histogram" for t in ours.values()) == 4
