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
