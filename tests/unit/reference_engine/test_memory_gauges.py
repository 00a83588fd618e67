"""The memory series the torch executor's engine exposes on /metrics: its components as its
own memory report says, the process's RSS, and the CUDA allocator's counters only on CUDA."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from infbench.loadgen.telemetry.memory_ledger import memory_row  # noqa: E402
from infbench.loadgen.telemetry.scrape import parse_prometheus  # noqa: E402
from reference_engine import metrics as prom  # noqa: E402
from reference_engine.config import EngineConfig  # noqa: E402
from reference_engine.engine import Engine  # noqa: E402
from reference_engine.server import memory_gauges  # noqa: E402


@pytest.mark.parametrize("device", ["cpu", *(["cuda"] if torch.cuda.is_available() else [])])
def test_torch_engine_exposes_its_components_rss_and_allocator(device: str) -> None:
    engine = Engine(EngineConfig(executor="torch", model="tiny-llama", device=device,
                                 block_size=8, num_gpu_blocks=48, seed=5))
    mem = memory_gauges(engine)
    report = engine.executor.memory_report()
    assert mem.components == report and mem.components["kv_pool"] > 0
    assert mem.rss_bytes is not None and mem.rss_bytes > 10 * 2**20
    assert (mem.num_gpu_blocks, mem.block_size) == (48, 8)
    if device == "cpu":
        assert mem.allocator == {}  # no caching allocator on the CPU: nothing is made up
    else:
        assert 0 < mem.allocator["allocated"] <= mem.allocator["reserved"]
    text = prom.render(engine.stats(), prom.RequestMetrics(), "tiny-llama", mem)
    rows = parse_prometheus(text)
    kv = [v for n, labels, v in rows if n == "reference_engine_memory_bytes" and 'component="kv_pool"' in labels]
    assert kv == [float(report["kv_pool"])]
    row = memory_row({"t_ns": [0] * len(rows), "name": [r[0] for r in rows],
                      "labels": [r[1] for r in rows], "value": [r[2] for r in rows]})
    assert row is not None and row["kv_blocks_total"] == 48 and row["kv_blocks_used"] == 0
    assert (row["allocator_reserved_bytes"] is None) == (device == "cpu")
