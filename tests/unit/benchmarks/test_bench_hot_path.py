"""The hot-path self-gate's statistic (benchmarks/bench_hot_path.py): paired rounds of client
CPU per chunk, head against base, judged by `infbench.gate`'s rule on the interval of the
geometric-mean ratio. A slowdown the rounds can tell from noise fails; an unchanged build
passes even when a neighbour slows whole rounds; noise that hides the answer is said, not
passed off as a verdict either way."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def hot_path() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the script imports its sibling machine_info
    spec = importlib.util.spec_from_file_location("bench_hot_path", BENCH / "bench_hot_path.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_hot_path"] = module
    spec.loader.exec_module(module)
    return module


def rounds(rng: np.random.Generator, n: int, cost_us: float, slowdown: float, noise: float,
           round_drift: float) -> tuple[list[float], list[float]]:
    """Per-round CPU per chunk of base and head: each round's neighbour multiplies both sides
    by the same drift; each run adds its own noise."""
    drift = np.exp(rng.normal(0.0, round_drift, n))
    base = cost_us * drift * np.exp(rng.normal(0.0, noise, n))
    head = cost_us * slowdown * drift * np.exp(rng.normal(0.0, noise, n))
    return head.tolist(), base.tolist()


@pytest.mark.parametrize("seed,n,cost,noise,drift", [(1, 6, 14.0, 0.02, 0.3), (2, 8, 9.5, 0.025, 0.5),
                                                     (3, 10, 21.0, 0.03, 0.2)])
def test_ten_percent_more_cpu_per_chunk_fails(hot_path: ModuleType, seed: int, n: int, cost: float,
                                              noise: float, drift: float) -> None:
    head, base = rounds(np.random.default_rng(seed), n, cost, 1.10, noise, drift)
    outcome, reason, (ratio, low, high) = hot_path.verdict(head, base, 0.05)
    assert outcome == "fail", reason
    assert low > 0.05 and abs(ratio - 0.10) < 0.04


@pytest.mark.parametrize("seed,n,cost,noise,drift", [(4, 6, 14.0, 0.02, 0.4), (5, 9, 11.0, 0.015, 0.6),
                                                     (6, 12, 30.0, 0.03, 0.25)])
def test_an_unchanged_build_passes_though_neighbours_slow_whole_rounds(
        hot_path: ModuleType, seed: int, n: int, cost: float, noise: float, drift: float) -> None:
    head, base = rounds(np.random.default_rng(seed), n, cost, 1.0, noise, drift)
    # Unpaired, the rounds' drift (sd 25-60%) would hide anything; paired it cancels.
    assert np.std(np.log(base)) > 3 * noise
    outcome, reason, _ = hot_path.verdict(head, base, 0.05)
    assert outcome == "pass", reason


def test_noise_wider_than_the_limit_is_inconclusive(hot_path: ModuleType) -> None:
    head, base = rounds(np.random.default_rng(7), 4, 14.0, 1.05, 0.08, 0.3)
    outcome, reason, (_, low, high) = hot_path.verdict(head, base, 0.05)
    assert outcome == "inconclusive", reason
    assert low < 0.05 < high and "more rounds" in reason


def test_the_interval_is_students_t_on_the_log_ratios(hot_path: ModuleType) -> None:
    head, base = [11.0, 12.1, 10.45], [10.0, 11.0, 9.5]  # every round exactly 1.1x
    ratio, low, high = hot_path.ratio_interval(head, base)
    assert ratio == pytest.approx(0.10) and low == pytest.approx(0.10) and high == pytest.approx(0.10)
    head2 = [10.0 * 1.2, 10.0 * 1.0]  # log ratios 0.182, 0: mean 0.091, sd 0.129, t(0.975, 1) = 12.706
    ratio2, low2, high2 = hot_path.ratio_interval(head2, [10.0, 10.0])
    half = 12.706 * np.std(np.log([1.2, 1.0]), ddof=1) / np.sqrt(2)
    assert np.log1p(ratio2) == pytest.approx(np.log(1.2) / 2)
    assert np.log1p(high2) - np.log1p(ratio2) == pytest.approx(half, rel=1e-3)


def test_the_stored_baseline_is_the_named_revisions_package(hot_path: ModuleType, tmp_path: Path) -> None:
    """The gate runs the archived package, so it needs no history; where the clone has the
    revision, the archive must be exactly its `infbench` package."""
    import subprocess
    import tarfile

    rev = hot_path.baseline_rev()
    with tarfile.open(hot_path.BASELINE_ARCHIVE) as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    assert "infbench/__main__.py" in names and all(n.startswith("infbench/") for n in names)
    # The archive is the one the baseline file names, byte for byte (checked with or without
    # history), and, where the clone has the revision, exactly its package.
    import hashlib

    recorded = hot_path.BASELINE_FILE.read_text().split()[1]
    assert recorded == "sha256:" + hashlib.sha256(hot_path.BASELINE_ARCHIVE.read_bytes()).hexdigest()
    listed = subprocess.run(["git", "-C", str(BENCH.parent), "ls-tree", "-r", "--name-only", rev, "infbench"],
                            capture_output=True, text=True)
    if listed.returncode != 0:  # a shallow clone: the recorded hash above is the check
        return
    assert names == set(listed.stdout.split())
    tree = hot_path.materialize(rev, tmp_path)
    blob = subprocess.run(["git", "-C", str(BENCH.parent), "show", f"{rev}:infbench/loadgen/runner.py"],
                          capture_output=True, check=True).stdout
    assert (tree / "infbench/loadgen/runner.py").read_bytes() == blob


def _gate_series(hot_path: ModuleType, monkeypatch: pytest.MonkeyPatch, head_cost: list[float],
                 base_cost: list[float]) -> tuple[tuple[str, str, tuple[float, float, float]], int]:
    """The gate's series as `main` runs them (`gate_series`), each round's figures taken from the lists in
    order instead of from runs: (the combined verdict, rounds used)."""
    import argparse

    head = hot_path.Client("head", [], {}, "")
    base = hot_path.Client("base", [], {}, "")
    costs = {"head": iter(head_cost), "base": iter(base_cost)}
    monkeypatch.setattr(hot_path, "one_round",
                        lambda c, args, work: c.cpu_per_chunk_us.append(next(costs[c.name])))
    args = argparse.Namespace(gate=True, rounds=6, max_rounds=10, limit=0.05)
    series = hot_path.gate_series([head, base], head, base, args, Path("."), [])
    return hot_path.combined(series), len(head.cpu_per_chunk_us)


@pytest.mark.parametrize("seed,cost,episode", [
    (8, 14.0, (1.3, 1.5, 1.4, 1.3, 1.1, 1.15)),     # like round R21's first rounds
    (9, 9.0, (1.3, 1.25, 1.5, 1.2, 1.1, 1.15)),
    (10, 20.0, (1.25, 1.4, 1.2, 1.3, 1.15, 1.1))])
def test_a_contention_episode_in_one_series_is_not_a_regression(
        hot_path: ModuleType, monkeypatch: pytest.MonkeyPatch, seed: int, cost: float,
        episode: tuple[float, ...]) -> None:
    """Round R21's false failure: an unchanged client read 1.2-1.7x for its first rounds (a
    contention pattern that favoured the base for minutes), then ~1.0. That series fails; the
    fresh series that confirms it does not, so the gate does not fail."""
    rng = np.random.default_rng(seed)
    head1, base1 = rounds(rng, 6, cost, 1.0, 0.03, 0.3)
    head1 = [h * e for h, e in zip(head1, episode, strict=True)]
    head2, base2 = rounds(rng, 10, cost, 1.0, 0.03, 0.3)
    assert hot_path.verdict(head1, base1, 0.05)[0] == "fail"  # alone, a false failure
    (outcome, reason, _), used = _gate_series(hot_path, monkeypatch, head1 + head2, base1 + base2)
    assert outcome != "fail", reason
    assert used > 6 and "fresh" in reason


@pytest.mark.parametrize("seed,cost,noise,drift", [(11, 14.0, 0.02, 0.3), (12, 9.5, 0.03, 0.5)])
def test_a_real_ten_percent_fails_its_confirmation_too(
        hot_path: ModuleType, monkeypatch: pytest.MonkeyPatch, seed: int, cost: float,
        noise: float, drift: float) -> None:
    rng = np.random.default_rng(seed)
    head, base = rounds(rng, 20, cost, 1.10, noise, drift)
    (outcome, reason, (ratio, low, _)), used = _gate_series(hot_path, monkeypatch, head, base)
    assert outcome == "fail" and "confirmed" in reason, reason
    assert low > 0.05 and 6 < used <= 20


def test_an_unchanged_build_needs_one_series(hot_path: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    head, base = rounds(np.random.default_rng(13), 20, 14.0, 1.0, 0.02, 0.4)
    (outcome, reason, _), used = _gate_series(hot_path, monkeypatch, head, base)
    assert outcome == "pass" and used == 6, reason
