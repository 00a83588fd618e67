"""Claim check, all-reduce models and token pricing."""

from __future__ import annotations

import math

import pytest

from infbench.specs import SpecError, get_gpu, get_model
from infbench.specs.allreduce import allreduce_report, ring_time, tree_time
from infbench.specs.claim import check_claim
from infbench.specs.cost import cost_report


def test_claim_above_bandwidth_floor_is_impossible_and_names_what_would_help() -> None:
    # 70B bf16 streams ~140 GB per token; one H100 moves 3.35 TB/s: at most ~24 tokens/s.
    r = check_claim(get_model("llama-3.1-70b"), get_gpu("h100"), 100)
    assert r.ceiling_tokens_per_s_per_user == pytest.approx(3.35e12 / r.bytes_per_token, rel=0.01)
    assert r.verdict == "impossible as stated"
    helping = {c.condition for c in r.conditions if c.makes_it_true}
    assert "tp=8" in helping
    assert not any(c.startswith("weights fp8") for c in helping)  # fp8 alone gives ~47


def test_claim_below_typical_is_plausible() -> None:
    r = check_claim(get_model("llama-3.1-8b"), get_gpu("h100"), 100)
    assert r.verdict == "plausible" and r.typical_tokens_per_s_per_user > 100


def test_claim_rejects_nonsense() -> None:
    with pytest.raises(SpecError, match="claimed"):
        check_claim(get_model("llama-3.1-8b"), get_gpu("h100"), -3)


def test_ring_and_tree_alpha_beta() -> None:
    # nccl-tests doc/PERFORMANCE.md: ring all-reduce moves 2(n-1)/n x S per rank.
    a, b = 2e-6, 100e9
    assert ring_time(1e6, 8, a, b) == pytest.approx(14 * a + 2 * 7 / 8 * 1e6 / b)
    assert tree_time(1e6, 8, a, b) == pytest.approx(6 * a + 2 * 1e6 / b)
    assert ring_time(1e6, 1, a, b) == 0


def test_allreduce_crossovers() -> None:
    r = allreduce_report(8, 1024, bandwidth=100e9, alpha_s=2e-6)
    assert r.ring_bandwidth_dominates_above == 8 * 2e-6 * 100e9
    s = r.ring_beats_tree_above  # at this size both models take the same time
    assert ring_time(s, 8, 2e-6, 100e9) == pytest.approx(tree_time(s, 8, 2e-6, 100e9))
    assert r.faster == "tree"  # 1 KiB is latency-bound: fewer steps win
    assert allreduce_report(8, 1 << 30, bandwidth=100e9).faster == "ring"


def test_tp_all_reduce_bytes_per_token() -> None:
    m = get_model("llama-3.1-70b")
    r = allreduce_report(8, 0, gpu=get_gpu("h100"), model=m)
    assert r.allreduces_per_token == 160
    assert r.bytes_per_token == 2 * 80 * 8192 * 2
    assert r.link_bytes_per_token_per_gpu == pytest.approx(r.bytes_per_token * 2 * 7 / 8)
    assert r.bandwidth < get_gpu("h100").interconnect_bandwidth / 2  # fraction applied


def test_allreduce_bad_n() -> None:
    with pytest.raises(SpecError, match="n \\(ranks\\)"):
        allreduce_report(1, 10, bandwidth=1e9)


def test_cost_per_million_tokens() -> None:
    m, g = get_model("llama-3.1-8b"), get_gpu("h100")
    r = cost_report(
        m, g, price_per_gpu_hour=3.6, input_tokens_per_s=10_000, output_tokens_per_s=1_000
    )
    assert r.usd_per_million_input == pytest.approx(3.6 / 3600 / 10_000 * 1e6)  # $0.10
    assert r.usd_per_million_output == pytest.approx(1.0)
    roof = cost_report(m, g, price_per_gpu_hour=3.6, tp=2)
    assert roof.input_source == "roofline" and roof.replica_price_per_s == pytest.approx(2e-3)
    assert roof.usd_per_million_output > roof.usd_per_million_input  # decode is the dear phase
    assert math.isfinite(roof.usd_per_million_output)
    with pytest.raises(SpecError, match="price"):
        cost_report(m, g, price_per_gpu_hour=0)
