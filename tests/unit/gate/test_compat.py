"""Which runs compare, and which pair request by request: equal fingerprints pair, a
missing or different fingerprint falls back to unpaired with a warning, and configurations
that say "same requests" while the fingerprints disagree are refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from infbench.gate.compat import MIN_PAIRED_SHARE, compare_runs, pair_requests
from infbench.gate.rules import load_rules
from infbench.gate.samples import RunSamples
from infbench.gate.verdict import WorkloadMismatch, run_gate
from tests.support.gate_runs import Machine, keep_requests, make_workload, simulate


def _with(s: RunSamples, fingerprint: str | None = "keep", **config: object) -> RunSamples:
    run = dataclasses.replace(s.run, config={**s.run.config, **config})
    fp = s.fingerprint if fingerprint == "keep" else fingerprint
    return dataclasses.replace(s, run=run, fingerprint=fp)


@pytest.fixture(scope="module")
def runs() -> tuple[RunSamples, RunSamples]:
    w = make_workload(300, 3)
    return simulate(w, Machine(), 1), simulate(w, Machine(), 2)


def test_equal_fingerprints_pair(runs) -> None:
    a, b = runs
    c = compare_runs(a, b)
    assert c.same_requests and not c.differences and not c.note
    out = run_gate(a, b, load_rules(None))
    assert out.paired and out.paired_requests == 300 and not out.warnings
    assert all(r.paired for r in out.results)


def test_a_missing_fingerprint_compares_unpaired_with_a_warning(runs) -> None:
    a, b = runs
    out = run_gate(a, _with(b, fingerprint=None), load_rules(None))
    assert not out.paired and any("no workload fingerprint" in w for w in out.warnings)
    assert not any(r.paired for r in out.results)


def test_another_seed_is_a_fair_but_unpaired_comparison(runs) -> None:
    a, b = runs
    other = _with(b, fingerprint="wf1-other", seed=99)
    c = compare_runs(a, other)
    assert not c.differences and not c.same_requests and "unpaired" in c.note
    out = run_gate(a, other, load_rules(None))
    assert not out.paired and any("different requests" in w for w in out.warnings)


def test_same_configuration_with_different_requests_is_refused(runs) -> None:
    a, b = runs
    changed = _with(b, fingerprint="wf1-other")  # same seed, same request count
    assert any(d.startswith("workload_fingerprint:") for d in compare_runs(a, changed).differences)
    with pytest.raises(WorkloadMismatch, match="--allow-different-workloads"):
        run_gate(a, changed, load_rules(None))
    out = run_gate(a, changed, load_rules(None), allow_different_workloads=True)
    assert any("workloads differ (allowed)" in w for w in out.warnings) and not out.paired


def test_a_different_load_is_refused_even_with_equal_fingerprints(runs) -> None:
    a, b = runs
    hotter = _with(b, arrivals={"kind": "closed", "concurrency": 32})
    with pytest.raises(WorkloadMismatch, match="arrivals.concurrency: 16 -> 32"):
        run_gate(a, hotter, load_rules(None))


def test_pairs_are_the_requests_both_runs_completed(runs) -> None:
    a, b = runs
    keep = np.ones(b.n_requests, dtype=bool)
    keep[::20] = False  # 5% failed in the candidate
    pairing, why = pair_requests(a, keep_requests(b, keep), 30)
    assert pairing is not None and not why and pairing.n == keep.sum()
    idx_a = a.request_idx[pairing.base_rows]
    idx_b = keep_requests(b, keep).request_idx[pairing.cand_rows]
    assert (idx_a == idx_b).all()
    # too many missing: pairing would compare a selection of the requests
    keep[: int(b.n_requests * (1 - MIN_PAIRED_SHARE)) + 5] = False
    pairing, why = pair_requests(a, keep_requests(b, keep), 30)
    assert pairing is None and "compared unpaired" in why
    out = run_gate(a, keep_requests(b, keep), load_rules(None))
    assert not out.paired and any("completed in both runs" in w for w in out.warnings)


def test_conversations_pair_by_conversation_and_turn(runs) -> None:
    a, b = runs
    n = a.n_requests
    conv, turn = np.arange(n) // 3, np.arange(n) % 3
    a2 = dataclasses.replace(a, conversation_id=conv, turn=turn)
    # the candidate's turns went out in another order, so their request_idx differ
    order = np.random.default_rng(0).permutation(n)
    b2 = dataclasses.replace(b, conversation_id=conv[order], turn=turn[order], request_idx=b.request_idx[order])
    pairing, _ = pair_requests(a2, b2, 30)
    assert pairing is not None and pairing.n == n
    assert (conv[pairing.base_rows] == conv[order][pairing.cand_rows]).all()
    assert (turn[pairing.base_rows] == turn[order][pairing.cand_rows]).all()
