"""The link probe's Python API on 4 real gloo ranks: the pair matrix names the slow rank and
its pairs (rank 1 slowed 2.5x here; the CLI test slows rank 2 3x), a slowed single link
(peer=) is named as a pair and blamed on no rank, and a healthy probe names nobody. Every
rank process is gone when run_probe returns."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from probes.links import ProbeConfig, SlowLink
from probes.links.launcher import run_probe

pytestmark = pytest.mark.e2e


def _cfg(**kw) -> ProbeConfig:
    base = {"ranks": 4, "ops": ["all_reduce", "broadcast"], "sizes": [262144], "repeats": 1, "iters": 3,
            "warmup": 1, "pairwise": True, "pair_size": 1024 ** 2, "bisect_size": 1024 ** 2, "timeout_s": 200}
    return ProbeConfig(**{**base, **kw})


def test_pair_matrix_and_bisection_name_rank_1() -> None:
    res = run_probe(_cfg(inject=SlowLink(1, 2.5)))
    assert mp.active_children() == []
    assert res.backend == "gloo"
    assert res.bisect["status"] == "slow_rank" and res.bisect["rank"] == 1, res.bisect["message"]
    assert res.pairwise["status"] == "slow_rank" and res.pairwise["rank"] == 1, res.pairwise["message"]
    slow = {tuple(p) for p in res.pairwise["slow_pairs"]}
    assert slow and slow <= {(0, 1), (1, 2), (1, 3)}
    pairs = [r for r in res.rows if r["phase"] == "pairwise"]
    assert {(r["src_rank"], r["dst_rank"]) for r in pairs} == {(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)}
    assert all(r["op"] == "sendrecv" and r["ranks"] == 2 and r["busbw_gbps"] == r["algbw_gbps"] for r in pairs)
    assert all(r["wrong"] == 0 for r in pairs if r["repeat"] == 0)  # each pair's data checked once


@pytest.mark.slow
def test_one_slow_link_is_a_pair_and_a_healthy_probe_names_nobody() -> None:
    res = run_probe(_cfg(inject=SlowLink(3, 4.0, peer=0), ops=["all_reduce"]))
    assert res.pairwise["rank"] is None and res.bisect["rank"] is None, (res.pairwise, res.bisect)
    assert res.pairwise["slow_pairs"] in ([[0, 3]], []), res.pairwise["message"]
    res = run_probe(_cfg(ops=["all_reduce"]))
    assert res.bisect["rank"] is None and res.pairwise["rank"] is None
    assert res.pairwise["slow_pairs"] == [], res.pairwise["message"]
    assert mp.active_children() == []
