"""The engine's time before first tokens from a real store (ENGINE_TIME_SQL through
`load_observations`): Little's law on the step log's waiting count and the prefill steps' time,
per request sent; a log with step ids missing (the engine's ring buffer overflowed between
polls) is counted and gives no total, so it cannot refute a client-side slowdown."""

from __future__ import annotations

import numpy as np
import pytest

from infbench.store import create_run, finish_run
from infbench.store.writer import insert_batch, to_arrow
from playbooks.replicas.compare import judge
from playbooks.replicas.observations import EngineTime, load_observations
from tests.support.stores import new_store
from tests.unit.playbooks.replicas.fleet_synth import synthetic_fleet


def _store(tmp_path, steps: dict[str, list[tuple[int, float, float, int, int]]], sent: dict[str, int]):
    con = new_store(tmp_path / "e.duckdb")
    create_run(con, run_id="r", config={}, target_url="http://lb:8000", model="m",
               endpoint="completions", t0_monotonic_ns=0)
    req: dict[str, list] = {k: [] for k in ("request_idx", "phase", "replica", "send_ns",
                                            "first_content_ns", "end_ns", "output_tokens")}
    for name, n in sent.items():
        for i in range(n):
            req["request_idx"].append(len(req["request_idx"]))
            req["phase"].append("measure")
            req["replica"].append(name)
            req["send_ns"].append(i * 10**8)
            req["first_content_ns"].append(i * 10**8 + 2 * 10**7)
            req["end_ns"].append(i * 10**8 + 5 * 10**7)
            req["output_tokens"].append(8)
    insert_batch(con, "r", "requests", to_arrow("requests", req))
    cols: dict[str, list] = {k: [] for k in ("replica", "step_id", "start_s", "end_s",
                                             "prefill_tokens", "num_waiting")}
    for name, rows in steps.items():
        for step_id, start, end, prefill, waiting in rows:
            for k, v in zip(cols, (name, step_id, start, end, prefill, waiting), strict=True):
                cols[k].append(v)
    insert_batch(con, "r", "engine_steps", to_arrow("engine_steps", cols))
    finish_run(con, "r", status="completed")
    return con


@pytest.mark.parametrize("step_s", [0.004, 0.011])
def test_queue_and_prefill_per_request_sent(tmp_path, step_s: float) -> None:
    # a: 40 steps, 2 waiting during the first 10, prefill in every 4th; 20 requests sent
    a = [(i + 1, i * step_s, (i + 1) * step_s, 64 if i % 4 == 0 else 0, 2 if i < 10 else 0)
         for i in range(40)]
    b = [(i + 101, i * step_s, (i + 1) * step_s, 0, 0) for i in range(30)]
    obs = load_observations(_store(tmp_path, {"a": a, "b": b}, {"a": 20, "b": 10}), "r", ["a", "b"])
    ta, tb = obs.engine_time["a"], obs.engine_time["b"]
    assert ta.queue_wait_ms == pytest.approx(2 * 10 * step_s * 1e3 / 20)
    assert ta.prefill_ms == pytest.approx(10 * step_s * 1e3 / 20)
    assert ta.steps_missing == 0 and ta.total_ms == pytest.approx(ta.queue_wait_ms + ta.prefill_ms)
    assert tb == EngineTime(0.0, 0.0, 0)


@pytest.mark.parametrize(("dropped", "missing"), [(range(10, 15), 5), (range(20, 21), 1)])
def test_a_log_with_steps_missing_counts_them_and_gives_no_total(tmp_path, dropped, missing: int) -> None:
    rows = [(i + 1, i * 0.01, (i + 1) * 0.01, 32, 1) for i in range(40) if i not in dropped]
    full = [(i + 1, i * 0.01, (i + 1) * 0.01, 32, 1) for i in range(40)]
    obs = load_observations(_store(tmp_path, {"a": rows, "b": full}, {"a": 10, "b": 10}), "r", ["a", "b"])
    assert obs.engine_time["a"].steps_missing == missing and obs.engine_time["a"].total_ms is None
    assert obs.engine_time["b"].steps_missing == 0 and obs.engine_time["b"].total_ms is not None


def _fair(seed: int, missing: dict[str, int]):
    rng = np.random.default_rng(seed)
    obs = synthetic_fleet(rng, {"x": (1.0, 1.0), "y": (1.0, 1.0), "z": (1.0, 1.0)}, n=150, noise=0.08,
                          second_noise=0.02, ttft_unmatched={"x": 1.4}, step_slowdown={},
                          queue_ms=dict.fromkeys("xyz", 0.0))
    obs.engine_time = {r: EngineTime(t.queue_wait_ms, t.prefill_ms, missing.get(r, 0))
                       for r, t in obs.engine_time.items()}
    verdicts, _ = judge(obs, min_effect=0.10, busier_ratio=1.25, alpha=0.05)
    return {v.replica: v for v in verdicts}


@pytest.mark.parametrize("seed", [41, 42])
@pytest.mark.parametrize("gap_in", ["x", "y"])
def test_a_gap_in_anyones_log_leaves_a_ttft_slowdown_standing(seed: int, gap_in: str) -> None:
    # Complete logs: x's engine queued and prefilled as its peers did, so its TTFT is refuted.
    assert _fair(seed, {})["x"].refuted_on == ["ttft"]
    # With steps missing from x's log or a peer's, their engine time may be undercounted:
    # nothing refutes x's slowdown.
    by = _fair(seed, {gap_in: 7})
    assert by["x"].slower and by["x"].slower_on == ["ttft"] and not by["x"].refuted_on
    assert not by["x"].engine_explains
