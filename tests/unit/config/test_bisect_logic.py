"""Delta debugging and the choice of settings to bisect, without launching anything."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

from infbench.config.bisect import Bisection, bisect_keys, budget, ddmin
from infbench.config.endpoint import from_engine_config
from infbench.config.model import Captured
from infbench.config.store import StoredConfig
from infbench.gate import FAIL, PASS


def oracle(culprits: set[str], calls: list[frozenset[str]]):  # type: ignore[no-untyped-def]
    def test(subset: list[str]) -> str:
        calls.append(frozenset(subset))
        return FAIL if culprits <= set(subset) else PASS
    return test


@pytest.mark.parametrize("n", [1, 2, 3, 6, 8, 13, 32])
def test_one_culprit_is_found_among_n_within_the_budget(n: int) -> None:
    keys = [f"k{i}" for i in range(n)]
    for culprit in keys:
        calls: list[frozenset[str]] = []
        assert ddmin(keys, oracle({culprit}, calls)) == [culprit]
        assert len(set(calls)) <= budget(n, 0)[0]


def test_every_pair_that_only_fails_together_is_found() -> None:
    keys = [f"k{i}" for i in range(8)]
    for a, b in itertools.combinations(keys, 2):
        calls: list[frozenset[str]] = []
        assert sorted(ddmin(keys, oracle({a, b}, calls))) == sorted([a, b])
        assert len(set(calls)) <= budget(8, 0)[0]


def test_unresolved_probes_never_enter_the_answer() -> None:
    keys = ["noisy", "culprit", "other", "more"]

    def test(subset: list[str]) -> str:
        if "culprit" in subset:
            return FAIL
        return "unresolved" if "noisy" in subset else PASS
    assert ddmin(keys, test) == ["culprit"]


def test_budget_is_ddmins_worst_case_with_retries() -> None:
    assert budget(8, 2) == (88, 2 * 88 * 3 + 3)
    assert budget(0, 0) == (0, 1)


def _stored(cap: Captured, label: str) -> StoredConfig:
    return StoredConfig(label, None, cap.engine, cap.version, cap.source_kind, cap.source, label,  # type: ignore[arg-type]
                        None, cap.digest(), [], cap.settings)


def test_keys_skip_outcomes_versions_and_settings_that_follow_another() -> None:
    from reference_engine.config import EngineConfig
    good = from_engine_config(EngineConfig.with_defaults("ref-1").resolved(), "g")
    bad = from_engine_config(EngineConfig.with_defaults("ref-2").resolved(), "b")
    keys = bisect_keys(_stored(good, "g"), _stored(bad, "b"))
    assert set(keys) == {"max_num_batched_tokens", "max_num_seqs", "cudagraph_mode",
                         "async_scheduling", "enable_prefix_caching"}
    # ref-1 sets the capture cap to 512; ref-2 leaves it to min(2 * 1024, 512): equal values.
    assert "cudagraph_max_capture_size" not in keys and "defaults" not in keys
    assert keys["max_num_seqs"] == 1024 and keys["cudagraph_mode"] == "FULL_AND_PIECEWISE"


class _DriftingHost(Bisection):
    """A bisection whose runs are numbers, not engines: a run is slow when it has the culprit,
    and from run `slow_from` on every run takes `host` times as long (above 1 a neighbour
    arrived, below 1 one left); the gate fails a run slower than its baseline."""

    def __init__(self, keys: list[str], culprit: str, slow_from: int,  # no engines here
                 host: float = 1.25) -> None:
        self.keys, self.culprit, self.slow_from, self.host = keys, culprit, slow_from, host
        self.load = SimpleNamespace(num_requests=64)
        self.max_doublings, self.say = 0, lambda m: None
        self.steps, self.cache, self.baselines = [], {}, {}
        self.last_run, self.runs_used, self.budget_runs = None, 0, budget(len(keys), 0)[1]
        self.slow: dict[str, float] = {}

    def _run(self, keys: tuple[str, ...], requests: int, log_dir: Path) -> str:
        self.runs_used += 1
        run_id = f"r{self.runs_used}"
        self.slow[run_id] = ((1.3 if self.culprit in keys else 1.0)
                             * (self.host if self.runs_used >= self.slow_from else 1.0))
        self.last_run = run_id
        return run_id

    def _record_run(self, run_id: str, keys: tuple[str, ...], verdict: str, reason: str) -> None:
        pass

    def _judge(self, base: str, cand: str) -> tuple[str, str]:
        return (FAIL if self.slow[cand] > self.slow[base] * 1.1 else PASS), ""


@pytest.mark.parametrize(("n", "slow_from"), [(6, 4), (8, 3), (5, 6)])
def test_a_host_that_slows_down_mid_bisection_does_not_name_an_innocent_knob(n: int, slow_from: int) -> None:
    keys = [f"k{i}" for i in range(n)]
    culprit = keys[-2]
    b = _DriftingHost(keys, culprit, slow_from)
    assert b.test(keys, Path(".")) == FAIL
    assert b.ddmin(keys, Path(".")) == [culprit]
    assert b.runs_used <= b.budget_runs
    # every fail that stood was against a baseline measured right before or right after it
    runs = [int(r[1:]) for s in b.steps for r in s.runs if s.verdict == FAIL]
    assert runs and all(b.slow[f"r{r}"] >= 1.3 for r in runs)


@pytest.mark.parametrize(("n", "fast_from", "host"), [(6, 3, 0.75), (8, 5, 0.7), (5, 4, 0.8)])
def test_a_host_that_speeds_up_mid_bisection_does_not_hide_the_culprit(
        n: int, fast_from: int, host: float) -> None:
    """The culprit's run, 1.3x slower, is faster than a baseline measured before the host sped
    up: judged against that baseline it passes, and ddmin names a larger set."""
    keys = [f"k{i}" for i in range(n)]
    culprit = keys[1]
    b = _DriftingHost(keys, culprit, fast_from, host)
    assert b.test(keys, Path(".")) == FAIL
    assert b.ddmin(keys, Path(".")) == [culprit]
    assert b.runs_used <= b.budget_runs
