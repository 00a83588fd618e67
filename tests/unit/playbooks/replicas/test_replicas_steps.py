"""A client-side slowdown at matched concurrency against the engines' own steps (synthetic
fleets with a step log): a replica the router sent more, whose TTFT its concurrency at send does
not fully explain while its steps at equal work are as fast as its peers', is busier and not
slower; with slower steps it stays slower; without a step log nothing refutes it. A replica sent
its fair share whose TTFT alone is slower, its steps as fast: slower when its engine's queue
(the log's waiting count) makes its requests wait longer than its peers' (a scheduler limit
queues without slowing a step), refuted when it does not (the time went before the engine: a
host or front end), and slower when the log has no waiting count."""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.replicas.compare import judge
from playbooks.replicas.matched import z_for
from tests.unit.playbooks.replicas.fleet_synth import synthetic_fleet


def _by(obs):
    verdicts, _ = judge(obs, min_effect=0.10, busier_ratio=1.25, alpha=0.05)
    return {v.replica: v for v in verdicts}


# Shares 2:1:1, 3:1:1 and 4:1:1; the busier one's TTFT 1.15-1.3x beyond what its concurrency says.
CASES = [(2.0, 1.2, 11), (3.0, 1.3, 12), (4.0, 1.15, 13)]


@pytest.mark.parametrize(("share", "unmatched", "seed"), CASES)
def test_sent_more_with_steps_as_fast_is_busier_not_slower(share: float, unmatched: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    replicas = {"x": (share, 1.0), "y": (1.0, 1.0), "z": (1.0, 1.0)}
    obs = synthetic_fleet(rng, replicas, n=120, noise=0.08, second_noise=0.02,
                          ttft_unmatched={"x": unmatched}, step_slowdown={})
    by = _by(obs)
    assert not any(v.slower for v in by.values())
    assert by["x"].busier and by["x"].refuted_on == ["ttft"]
    assert by["x"].request_ratio == pytest.approx(share, rel=0.01)
    # The same requests without the step log: the client side alone names x slower (the
    # rule above rests on the steps, nothing else).
    obs.steps = {k: v[:0] for k, v in obs.steps.items()}
    by = _by(obs)
    assert [r for r, v in by.items() if v.slower] == ["x"] and not by["x"].refuted_on


@pytest.mark.parametrize(("share", "unmatched", "seed"), CASES)
def test_sent_more_with_slower_steps_is_slower(share: float, unmatched: float, seed: int) -> None:
    rng = np.random.default_rng(seed + 100)
    replicas = {"x": (share, 1.0), "y": (1.0, 1.0), "z": (1.0, 1.0)}
    obs = synthetic_fleet(rng, replicas, n=120, noise=0.08, second_noise=0.02,
                          ttft_unmatched={"x": unmatched}, step_slowdown={"x": 1.3})
    by = _by(obs)
    assert [r for r, v in by.items() if v.slower] == ["x"] and not by["x"].refuted_on
    assert "step" in by["x"].slower_on


# (TTFT factor its concurrency does not explain, seed, base TTFT ~ 20 x (1 + 0.15 x load)).
FAIR = [(1.4, 21), (1.25, 22), (1.6, 23)]


def _fair(queued: float, seed: int, queue_ms: dict[str, float] | None, **steps):
    rng = np.random.default_rng(seed)
    replicas = {"x": (1.0, 1.0), "y": (1.0, 1.0), "z": (1.0, 1.0)}
    return synthetic_fleet(rng, replicas, n=150, noise=0.08, second_noise=0.02,
                           ttft_unmatched={"x": queued}, step_slowdown={}, queue_ms=queue_ms, **steps)


def _peer_ttft(obs) -> float:
    q = obs.requests
    return float(np.median(q["ttft_ms"][q["replica"].astype(str) != "x"]))


@pytest.mark.parametrize(("queued", "seed"), FAIR)
def test_a_fair_share_slower_on_ttft_whose_engine_queued_stays_slower(queued: float, seed: int) -> None:
    probe = _fair(queued, seed, None)
    # The engine's queue holds x's requests for the TTFT they lose; its peers' queue a little.
    extra = (queued - 1.0) * _peer_ttft(probe)
    obs = _fair(queued, seed, {"x": 1.0 + extra, "y": 1.0, "z": 1.0})
    by = _by(obs)
    assert [r for r, v in by.items() if v.slower] == ["x"] and by["x"].slower_on == ["ttft"]
    assert not by["x"].refuted_on
    assert by["x"].engine.queue_wait_ms - by["x"].peers_engine.queue_wait_ms == pytest.approx(extra)
    assert by["x"].engine_explains and not by["y"].engine_explains


@pytest.mark.parametrize(("queued", "seed"), FAIR)
@pytest.mark.parametrize("peers_wait_ms", [0.0, 3.0])
def test_a_fair_share_slower_on_ttft_with_steps_and_queue_as_its_peers_is_not_slower(
        queued: float, seed: int, peers_wait_ms: float) -> None:
    # Everyone's engine queues alike (not at all, or 3 ms a request): x's extra TTFT is
    # spent before its engine.
    obs = _fair(queued, seed, dict.fromkeys("xyz", peers_wait_ms))
    by = _by(obs)
    assert not any(v.slower for v in by.values())
    assert by["x"].refuted_on == ["ttft"] and not by["x"].busier
    assert by["x"].comparisons["ttft"].ratio() > 1.1  # the client did see it
    # A queue short of min_effect of the peers' TTFT does not explain it either.
    obs = _fair(queued, seed, {"x": 0.05 * _peer_ttft(obs), "y": 0.0, "z": 0.0})
    assert not _by(obs)["x"].slower


@pytest.mark.parametrize(("queued", "seed"), FAIR)
def test_a_fair_share_slower_on_ttft_without_the_waiting_count_stays_slower(queued: float, seed: int) -> None:
    by = _by(_fair(queued, seed, None))
    assert [r for r, v in by.items() if v.slower] == ["x"] and by["x"].slower_on == ["ttft"]
    assert not by["x"].refuted_on and by["x"].engine is None


# TTFT factor, seed, x's prefill-step factor that costs its requests about that TTFT.
PREFILL = [(1.4, 31, 2.3), (1.25, 32, 1.8)]


@pytest.mark.parametrize(("queued", "seed", "factor"), PREFILL)
def test_a_fair_share_slower_on_ttft_whose_prefill_steps_are_slower_stays_slower(
        queued: float, seed: int, factor: float) -> None:
    # One step carries each request's prefill among 250 steps a second, so the pooled steps
    # read "not slower"; no queue anywhere. The prefill steps' time per request says it.
    obs = _fair(queued, seed, dict.fromkeys("xyz", 0.0), prefill_slowdown={"x": factor},
                steps_per_s=250, prefill_per_request=True)
    by = _by(obs)
    step = by["x"].comparisons["step"]
    z = z_for(0.05, 3 * 3)  # the playbook's: Bonferroni over replicas x metrics
    assert step.delta + step.quantile(z) * step.se < np.log1p(0.10)  # pooled: not slower
    assert [r for r, v in by.items() if v.slower] == ["x"] and by["x"].slower_on == ["ttft"]
    assert not by["x"].refuted_on and by["x"].engine_explains
    assert by["x"].engine.prefill_ms > factor * 0.8 * by["x"].peers_engine.prefill_ms
    # The same prefill at its peers' speed: refuted, the time went before the engine.
    obs = _fair(queued, seed, dict.fromkeys("xyz", 0.0), steps_per_s=250, prefill_per_request=True)
    assert _by(obs)["x"].refuted_on == ["ttft"]


# A host that runs steps late (round R60 beside a busy neighbour): the pooled step interval
# cannot tell, and the engine's own time before first tokens decides a TTFT-only slowdown.
# (share, TTFT factor its concurrency does not explain, seed).
NOISY = [(3.0, 1.45, 41), (1.0, 1.35, 42), (2.0, 1.3, 43)]


def _noisy(share: float, unmatched: float, seed: int, queue_ms: dict[str, float]):
    rng = np.random.default_rng(seed)
    replicas = {"x": (share, 1.0), "y": (1.0, 1.0), "z": (1.0, 1.0)}
    return synthetic_fleet(rng, replicas, n=150, noise=0.08, second_noise=0.02,
                           ttft_unmatched={"x": unmatched}, step_slowdown={}, queue_ms=queue_ms,
                           steps_per_s=30, prefill_per_request=True, step_noise=0.8)


def _inconclusive(v) -> bool:  # noqa: ANN001
    step = v.comparisons["step"]
    z = z_for(0.05, 3 * 3)
    return step.delta + step.quantile(z) * step.se >= np.log1p(0.10)


@pytest.mark.parametrize(("share", "unmatched", "seed"), NOISY)
def test_steps_that_cannot_tell_leave_a_ttft_slowdown_to_the_engines_own_time(
        share: float, unmatched: float, seed: int) -> None:
    obs = _noisy(share, unmatched, seed, dict.fromkeys("xyz", 0.0))
    by = _by(obs)
    assert _inconclusive(by["x"])  # the case: its steps could be 10% slower for all they say
    assert by["x"].comparisons["ttft"].ratio() > 1.15  # and the client did see it
    assert not any(v.slower for v in by.values())
    assert by["x"].refuted_on == ["ttft"] and by["x"].refuted_by == "engine_time"
    assert by["x"].busier == (share >= 1.25)
    # The engine queued x's requests for the TTFT they lose: slower, however noisy the steps.
    extra = (unmatched - 1.0) * _peer_ttft(obs)
    by = _by(_noisy(share, unmatched, seed, {"x": extra, "y": 0.0, "z": 0.0}))
    assert [r for r, v in by.items() if v.slower] == ["x"] and by["x"].slower_on == ["ttft"]
    assert by["x"].engine_explains and not by["x"].refuted_on and by["x"].refuted_by == ""


@pytest.mark.parametrize(("share", "unmatched", "seed"), NOISY)
def test_the_words_for_a_refutation_name_what_refuted_it(share: float, unmatched: float, seed: int) -> None:
    from playbooks.replicas.engine_time import outside_engine, refutation
    verdicts, z = judge(_noisy(share, unmatched, seed, dict.fromkeys("xyz", 0.0)),
                        min_effect=0.10, busier_ratio=1.25, alpha=0.05)
    x = verdicts[0]
    words = refutation(x, z) if x.busier else outside_engine(x, z)
    assert "time before first tokens does not explain" in words and "queued it 0.0 ms" in words
    assert "as fast as its peers'" not in words  # its steps could not tell
    assert x.comparisons["step"].describe(z) in words
