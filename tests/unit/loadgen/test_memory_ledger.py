"""One memory_samples row per /metrics scrape, from vLLM's, SGLang's and the reference
engine's names."""

from __future__ import annotations

import pytest

from infbench.loadgen.telemetry.memory_ledger import memory_row
from infbench.loadgen.telemetry.scrape import parse_prometheus
from reference_engine import metrics as prom
from reference_engine.engine import EngineStats


def _cols(text: str, t_ns: int = 5) -> dict:
    rows = parse_prometheus(text)
    return {"t_ns": [t_ns] * len(rows), "name": [r[0] for r in rows],
            "labels": [r[1] for r in rows], "value": [r[2] for r in rows]}


def test_reference_engine_exposition_gives_every_column() -> None:
    stats = EngineStats(num_running=3, num_waiting=2, kv_usage=0.25, kv_blocks_used=25,
                        kv_blocks_total=100, prefix_cache_queries=0, prefix_cache_hits=0,
                        num_preemptions=7, prompt_tokens_total=0, generation_tokens_total=0,
                        num_steps=1, num_requests_finished=0, hung=False)
    requests = prom.RequestMetrics()
    requests.request_success.update({"stop": 4, "length": 5})
    mem = prom.MemoryGauges(rss_bytes=123_456_789, num_gpu_blocks=100, block_size=16,
                            components={"weights": 10, "kv_pool": 20, "other": 3},
                            allocator={"allocated": 1000, "reserved": 1500})
    row = memory_row(_cols(prom.render(stats, requests, "m", mem)))
    assert row == {"t_ns": 5, "source": "metrics", "kv_usage": 0.25, "kv_blocks_total": 100,
                   "kv_blocks_used": 25, "num_running": 3, "num_waiting": 2,
                   "preemptions_total": 7, "requests_finished_total": 9,
                   "process_rss_bytes": 123_456_789, "allocator_allocated_bytes": 1000,
                   "allocator_reserved_bytes": 1500, "replica": None}


# vLLM 0.9-style exposition (both the deprecated and the new usage gauge, two DP engines).
VLLM = """
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.3
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.3
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="2000"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="1",num_gpu_blocks="2000"} 1.0
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 6.0
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
process_resident_memory_bytes 2.5e+09
"""


def test_vllm_data_parallel_sums_counts_and_averages_usage() -> None:
    row = memory_row(_cols(VLLM))
    assert row is not None
    assert row["kv_usage"] == pytest.approx(0.4)  # the new name only, not both
    assert row["kv_blocks_total"] == 4000 and row["kv_blocks_used"] == 1600
    assert row["num_running"] == 10 and row["preemptions_total"] == 2
    assert row["process_rss_bytes"] == 2_500_000_000
    assert row["num_waiting"] is None and row["allocator_reserved_bytes"] is None


def test_sglang_counts_tokens_as_pages() -> None:
    text = ('sglang:token_usage{model_name="m"} 0.75\n'
            'sglang:max_total_num_tokens{model_name="m"} 400000\n'
            'sglang:num_used_tokens{model_name="m"} 300000\n'
            'sglang:num_queue_reqs{model_name="m"} 12\n')
    row = memory_row(_cols(text))
    assert row is not None
    assert (row["kv_usage"], row["kv_blocks_total"], row["kv_blocks_used"],
            row["num_waiting"]) == (0.75, 400000, 300000, 12)


def test_scrape_without_memory_series_gives_no_row() -> None:
    assert memory_row(_cols('vllm:prompt_tokens_total{model_name="m"} 5\n')) is None
    assert memory_row({"t_ns": [], "name": [], "labels": [], "value": []}) is None


def test_a_fleet_scrape_keeps_its_replica_and_a_dcgm_exporter_makes_no_row() -> None:
    text = ('vllm:num_requests_running{model_name="m"} 3\n'
            'process_resident_memory_bytes 123456789\n')
    cols = _cols(text) | {"replica": ["b"] * 2, "source": ["metrics"] * 2}
    row = memory_row(cols)
    assert row is not None and row["replica"] == "b" and row["process_rss_bytes"] == 123456789
    assert memory_row(_cols(text))["replica"] is None  # one target: no replica
    # A dcgm-exporter also exposes process_resident_memory_bytes: its own, not the engine's.
    assert memory_row(_cols(text) | {"replica": ["b"] * 2, "source": ["dcgm"] * 2}) is None
