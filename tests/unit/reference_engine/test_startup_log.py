"""The reference engine prints its start-up budget in vLLM V1's words, and the figures are
the memory plan's (the sim executor's own plan, the one `infbench plan memory` computes)."""

from __future__ import annotations

import logging
import re

import pytest

from infbench.specs.gpus import GIB
from reference_engine import startup_log
from reference_engine.config import EngineConfig
from reference_engine.sim_executor import SimExecutor


class _Lines:
    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog

    def __iter__(self):  # noqa: ANN204
        return iter(self.caplog.messages)

    def __getitem__(self, i: int) -> str:
        return self.caplog.messages[i]

    def __contains__(self, line: object) -> bool:
        return line in self.caplog.messages


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> _Lines:
    caplog.set_level(logging.INFO, logger="reference_engine.startup")
    return _Lines(caplog)  # reads the records at each use


@pytest.mark.parametrize("settings", [
    {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM", "max_model_len": 32768},
    {"model": "qwen2.5-3b-instruct", "gpu": "A100-80GB", "max_model_len": 4096,
     "gpu_memory_utilization": 0.62, "block_size": 32},
])
def test_sim_plan_is_the_executors_plan(settings: dict) -> None:
    config = EngineConfig(**settings)
    assert startup_log.sim_plan(config) == SimExecutor(config).plan


def test_started_engine_logs_every_phase_with_the_plans_figures(lines: _Lines) -> None:
    config = EngineConfig(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", max_model_len=20000,
                          gpu_memory_utilization=0.81)
    ex = SimExecutor(config)
    startup_log.log_started(ex, config, ex.num_blocks)
    text = "\n".join(lines)
    p = ex.plan
    assert f"Model loading took {p.weights_bytes / GIB:.4f} GiB" in text
    assert f"torch peak memory increase: {p.activation_bytes / GIB:.2f}GiB" in text
    assert f"Available KV cache memory: {p.remaining_bytes / GIB:.2f} GiB" in text
    assert f"GPU KV cache size: {p.kv_tokens:,} tokens" in text
    conc = re.search(r"Maximum concurrency for 20,000 tokens per request: ([\d.]+)x", text)
    assert conc and float(conc.group(1)) == pytest.approx(p.kv_tokens / 20000, abs=0.01)
    assert "Graph capturing finished" in text and "ValueError" not in text


def test_failed_start_logs_the_phases_then_vllms_error(lines: _Lines) -> None:
    config = EngineConfig(model="llama-3.1-70b", gpu="h100", tensor_parallel_size=2,
                          max_model_len=131072)
    with pytest.raises(ValueError):
        SimExecutor(config)
    startup_log.log_failed(config)
    assert lines[-1].startswith("ValueError: To serve at least one request with the models's "
                                "max seq len (131072)")
    assert any(m.startswith("Available KV cache memory: 3.39 GiB") for m in lines)
    assert not any("GPU KV cache size" in m for m in lines)


def test_eager_engine_logs_no_graphs_and_override_is_said(lines: _Lines) -> None:
    config = EngineConfig(model="qwen2.5-3b-instruct", max_model_len=4096, enforce_eager=True,
                          num_gpu_blocks=37)
    ex = SimExecutor(config)
    startup_log.log_started(ex, config, 37)
    assert not any("Graph capturing" in m for m in lines)
    assert any(m.startswith("Overriding num_gpu_blocks=") and m.endswith("=37") for m in lines)
    assert "GPU KV cache size: 592 tokens" in lines
