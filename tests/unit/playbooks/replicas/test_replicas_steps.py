"""A client-side slowdown at matched concurrency against the engines' own steps (synthetic
fleets with a step log): a replica the router sent more, whose TTFT its concurrency at send does
not fully explain while its steps at equal work are as fast as its peers', is busier and not
slower; with slower steps, or with its fair share of the requests (a scheduler limit queues
without slowing a step), it stays slower; without a step log nothing refutes it."""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.replicas.compare import judge
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


@pytest.mark.parametrize(("queued", "seed"), [(1.4, 21), (1.25, 22)])
def test_a_fair_share_slower_on_ttft_with_steps_as_fast_stays_slower(queued: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    replicas = {"x": (1.0, 1.0), "y": (1.0, 1.0), "z": (1.0, 1.0)}
    obs = synthetic_fleet(rng, replicas, n=150, noise=0.08, second_noise=0.02,
                          ttft_unmatched={"x": queued}, step_slowdown={})
    by = _by(obs)
    assert [r for r, v in by.items() if v.slower] == ["x"] and by["x"].slower_on == ["ttft"]
    assert not by["x"].refuted_on
