"""The triage's one ruler: severity, then the share of requests lost, then the share of the p99
tail, then confidence."""

from __future__ import annotations

from typing import Any

from playbooks.findings import Finding
from playbooks.triage.playbook import _rank_key


def _f(verdict: str, severity: str = "critical", confidence: float = 0.9) -> Finding:
    return Finding(verdict, verdict, confidence, severity, "", [], [])


def _dmg(lost: float, itl: float) -> dict[str, Any]:
    return {"itl_p99_share": itl, "ttft_p99_share": 0.0, "lost_share": lost,
            "requests_lost": int(lost * 14), "score": max(lost, itl)}


def _order(found: list) -> list[str]:
    return [f.verdict for _, f, _ in sorted(found, key=_rank_key)]


def test_a_hang_that_lost_requests_heads_a_stall_that_owns_more_of_the_gaps() -> None:
    # Round Q2: host pauses before the hang owned 71% of the p99 gaps, the hang lost 9 of 14.
    found = [("stalls", _f("engine_wide_stall"), _dmg(0.0, 0.71)),
             ("stalls", _f("engine_stopped"), _dmg(0.64, 0.0)),
             ("mbu", _f("decode_mbu", "info"), None)]
    assert _order(found) == ["engine_stopped", "engine_wide_stall", "decode_mbu"]


def test_more_lost_first_then_more_of_the_tail_then_confidence_and_severity_above_all() -> None:
    found = [("a", _f("less_lost"), _dmg(0.1, 0.9)),
             ("b", _f("more_lost"), _dmg(0.3, 0.0)),
             ("c", _f("tail_unsure", confidence=0.5), _dmg(0.0, 0.5)),
             ("d", _f("tail_sure"), _dmg(0.0, 0.5)),
             ("e", _f("whole_run"), None),
             ("f", _f("warning_lost_all", "warning"), _dmg(1.0, 1.0))]
    assert _order(found) == ["more_lost", "less_lost", "tail_sure", "tail_unsure", "whole_run",
                             "warning_lost_all"]
