"""A fleet of vLLM replicas has no step log: the engine's own time before first tokens comes from
vLLM's per-request histograms (ENGINE_TIME_METRICS_SQL), scraped from each replica's /metrics.
The scrapes here are a real vLLM 0.32.0 exposition (tests/fixtures/real_vllm/, every series it
printed) with the queue-time and prefill-time series advanced by what each replica's requests
added. A replica sent more of the load whose TTFT is higher at matched concurrency while its
engine queued and prefilled as its peers did is busier, not slower (its API server, not its
engine); one whose engine queued its requests longer stays slower."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infbench.promtext import parse_raw
from infbench.store import create_run, finish_run
from infbench.store.writer import insert_batch, to_arrow
from playbooks.replicas import diagnose_replicas
from playbooks.replicas.observations import load_observations
from tests.support.stores import new_store

FIXTURE = Path(__file__).parents[3] / "fixtures" / "real_vllm" / "vllm-0.32.0-cpu-metrics.txt"
QUEUE, PREFILL = "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds"


def _scrape(added: dict[str, float], restarted: bool = False) -> list[tuple[str, str, float]]:
    """The real exposition with `added` (series name -> amount) on top of its values; after a
    restart the engine counts again from zero, so those series are `added` alone, and the
    process started 100 s later."""
    def value(n: str, v: float) -> float:
        if restarted and n == "process_start_time_seconds":
            return v + 100.0
        return added[n] if restarted and n in added else v + added.get(n, 0.0)
    return [(n, lab, value(n, v)) for n, lab, v in parse_raw(FIXTURE.read_text())]


def _metrics(con, replica: str, scrapes: list[dict[str, float]], source: str = "metrics",
             restart_at: int | None = None) -> None:
    cols: dict[str, list] = {k: [] for k in ("t_ns", "source", "name", "labels", "value", "replica")}
    for i, added in enumerate(scrapes):
        for name, labels, value in _scrape(added, restart_at is not None and i >= restart_at):
            for k, v in zip(cols, (i * 10**9, source, name, labels, value, replica), strict=True):
                cols[k].append(v)
    insert_batch(con, "run", "metric_samples", to_arrow("metric_samples", cols))


def _added(n: int, queue_ms: float, prefill_ms: float) -> dict[str, float]:
    return {f"{QUEUE}_count": n, f"{QUEUE}_sum": n * queue_ms / 1e3,
            f"{PREFILL}_count": n, f"{PREFILL}_sum": n * prefill_ms / 1e3}


def _fleet(tmp_path: Path, shares: dict[str, int], ttft_factor: dict[str, float], seed: int):
    """Requests per replica (`shares` x 100), TTFT on one load curve times the replica's factor."""
    rng = np.random.default_rng(seed)
    con = new_store(tmp_path / "f.duckdb")
    create_run(con, run_id="run", config={"fleet": {"replicas": [{"name": n} for n in shares]}},
               target_url="http://lb:8000", model="m", endpoint="completions", t0_monotonic_ns=0)
    cols: dict[str, list] = {k: [] for k in ("request_idx", "phase", "replica", "replica_concurrency",
                                             "send_ns", "first_content_ns", "last_content_ns",
                                             "end_ns", "output_tokens")}
    for name, share in shares.items():
        n = 100 * share
        send = np.sort(rng.uniform(0, 20, n))
        conc = rng.integers(1, 6, n)
        ttft = 0.03 * (1 + 0.1 * conc) * ttft_factor.get(name, 1.0) * np.exp(rng.normal(0, 0.1, n))
        tpot = 0.005 * (1 + 0.1 * conc) * np.exp(rng.normal(0, 0.1, n))
        for i in range(n):
            s = int(send[i] * 1e9)
            first = s + int(ttft[i] * 1e9)
            last = first + int(tpot[i] * 63 * 1e9)
            for k, v in zip(cols, (len(cols["request_idx"]), "measure", name, int(conc[i]), s, first,
                                   last, last, 64), strict=True):
                cols[k].append(v)
    insert_batch(con, "run", "requests", to_arrow("requests", cols))
    finish_run(con, "run", status="completed")
    return con


def test_queue_and_prefill_per_request_from_the_histograms(tmp_path: Path) -> None:
    con = _fleet(tmp_path, {"a": 1, "b": 1}, {}, 3)
    # a: 40 requests by the second scrape, 90 by the third, averaging 3.5 and 42 ms
    _metrics(con, "a", [{}, _added(40, 2.0, 30.0), _added(90, 3.5, 42.0)])
    # another scraper's copy of a's series (a Prometheus pull) is not a's engine twice over
    _metrics(con, "a", [{}, _added(500, 90.0, 900.0)], source="prometheus")
    # b: 30 requests, then its engine restarted and counted 20 more from zero
    _metrics(con, "b", [{}, _added(30, 1.0, 20.0), _added(20, 4.0, 25.0)], restart_at=2)
    # c restarted too, and counted more requests since than it had before (no count fell)
    _metrics(con, "c", [{}, _added(3, 1.0, 20.0), _added(80, 2.0, 10.0)], restart_at=2)
    obs = load_observations(con, "run", ["a", "b", "c"])
    a, b, c = obs.engine_time["a"], obs.engine_time["b"], obs.engine_time["c"]
    assert c.queue_wait_ms == pytest.approx((3 * 1.0 + 80 * 2.0) / 83)
    assert c.prefill_ms == pytest.approx((3 * 20.0 + 80 * 10.0) / 83)
    assert a.source == b.source == "vllm" and a.steps_missing == b.steps_missing == 0
    assert (a.queue_wait_ms, a.prefill_ms) == (pytest.approx(3.5), pytest.approx(42.0))
    assert b.queue_wait_ms == pytest.approx((30 * 1.0 + 20 * 4.0) / 50)
    assert b.prefill_ms == pytest.approx((30 * 20.0 + 20 * 25.0) / 50)
    assert "vllm:request_queue_time_seconds_sum" in obs.engine_time_sql
    con.close()


def test_a_step_log_is_the_source_when_the_fleet_has_one(tmp_path: Path) -> None:
    con = _fleet(tmp_path, {"a": 1, "b": 1}, {}, 4)
    for r in ("a", "b"):
        _metrics(con, r, [{}, _added(50, 40.0, 40.0)])
    cols = {"replica": ["a", "b"], "step_id": [1, 1], "start_s": [0.0, 0.0], "end_s": [0.01, 0.01],
            "prefill_tokens": [32, 32], "num_waiting": [0, 0]}
    insert_batch(con, "run", "engine_steps", to_arrow("engine_steps", cols))
    obs = load_observations(con, "run", ["a", "b"])
    assert {t.source for t in obs.engine_time.values()} == {"steps"}
    assert obs.engine_time["a"].prefill_ms == pytest.approx(10.0 / 100)
    con.close()


def _verdicts(con):
    """replica -> its busier or slower finding's verdict, and the diagnosis."""
    d = diagnose_replicas(con, "run")
    return {f.title.split()[1]: f.verdict for f in d.findings
            if f.verdict in ("replica_busier", "replica_slower")}, d


@pytest.mark.parametrize(("shares", "factor", "seed"), [
    ({"a": 3, "b": 1, "c": 1}, 1.4, 5), ({"a": 2, "b": 1}, 1.6, 6), ({"b": 1, "a": 4, "c": 1}, 1.35, 7)])
def test_a_busier_vllm_replica_whose_engine_did_not_wait_longer_is_busier_not_slower(
        tmp_path: Path, shares: dict[str, int], factor: float, seed: int) -> None:
    con = _fleet(tmp_path, shares, {"a": factor}, seed)
    # without the histograms nothing tells its API server from its engine: slower stands
    verdicts, _ = _verdicts(con)
    assert verdicts.get("a") == "replica_slower", verdicts
    for r, share in shares.items():
        _metrics(con, r, [{}, _added(100 * share, 0.6, 11.0 + seed / 10)])
    verdicts, d = _verdicts(con)
    assert verdicts == {"a": "replica_busier"}, [f.summary for f in d.findings]
    row = next(r for r in d.context["replicas"] if r["replica"] == "a")
    assert row["refuted_on"] == ["ttft"] and row["refuted_by"] == "engine_time", row
    f = next(f for f in d.findings if f.verdict == "replica_busier")
    assert "does not explain" in f.summary and "from its scheduling to its first token" in f.summary
    assert "steps" not in f.summary, f.summary  # no step log: nothing is said of its steps
    ev = next(e for e in f.evidence if e.name == "engine_time_before_first_token")
    assert "vLLM's own histograms" in ev.note and "request_prefill_time" in ev.sql
    assert ev.values["queue_wait_ms"] == pytest.approx(0.6)
    con.close()


@pytest.mark.parametrize(("queue_ms", "prefill_ms", "seed", "why"), [
    (25.0, 11.0, 8, "a scheduler limit holds its requests"),
    (0.6, 30.0, 9, "it does more prefill work per request")])
def test_a_vllm_replica_whose_engine_held_its_requests_stays_slower(
        tmp_path: Path, queue_ms: float, prefill_ms: float, seed: int, why: str) -> None:
    shares = {"a": 3, "b": 1, "c": 1}
    con = _fleet(tmp_path, shares, {"a": 1.5}, seed)
    for r, share in shares.items():
        mine = r == "a"
        _metrics(con, r, [{}, _added(100 * share, queue_ms if mine else 0.6,
                                      prefill_ms if mine else 11.0)])
    verdicts, d = _verdicts(con)
    assert verdicts == {"a": "replica_slower"}, [f.summary for f in d.findings]
    summary = next(f.summary for f in d.findings if f.verdict == "replica_slower")
    # it was sent 3x the requests, and said so; no step log, so nothing about its steps
    assert "was sent 3.00x its peers' requests" in summary and "comparison is at equal load" in summary
    assert why in summary and "steps are not slower" not in summary, summary
    con.close()
