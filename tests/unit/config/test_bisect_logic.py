"""Delta debugging and the choice of settings to bisect, without launching anything."""

from __future__ import annotations

import itertools

import pytest

from infbench.config.bisect import bisect_keys, budget, ddmin
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
    assert budget(8, 2) == (88, 88 * 3 + 3)
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
