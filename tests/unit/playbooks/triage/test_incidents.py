"""Joining findings of different playbooks into incidents: by time overlap and replica, never
by name; a contradiction is shown, complementary causes are only joined."""

from __future__ import annotations

import pytest

from playbooks.triage.incidents import JOIN_OVERLAP, Ranked, join, overlap


def _r(i: int, playbook: str, verdict: str, scope: dict, severity: str = "warning") -> Ranked:
    return Ranked(playbook, verdict, severity, 0.9, scope, None, i)


@pytest.mark.parametrize(("a", "b", "share"), [
    ([[1.0, 3.0]], [[2.0, 6.0]], 0.5),            # half of the shorter (2 s) shared
    ([[0.0, 10.0]], [[2.0, 2.5], [7.0, 8.0]], 1.0),  # the short one lies inside
    ([[0.0, 1.0]], [[1.5, 2.0]], 0.0),
    ([[4.0, None]], [[6.0, 7.0]], 1.0),            # open-ended: to the run's end (20 s)
    ([[5.0, 5.0]], [[4.0, 6.0]], 1.0),             # an instant inside a window
])
def test_overlap_is_over_the_shorter_scope(a: list, b: list, share: float) -> None:
    assert overlap({"windows_s": a}, {"windows_s": b}, 20.0) == pytest.approx(share)
    assert overlap({"windows_s": b}, {"windows_s": a}, 20.0) == pytest.approx(share)


def test_findings_join_by_time_or_replica_not_by_name() -> None:
    ranked = [
        _r(0, "memory", "kv_cache_exhausted", {"windows_s": [[3.0, None]]}, "critical"),
        _r(1, "stalls", "preemption_stall", {"windows_s": [[3.5, 3.7], [5.0, 5.2]]}, "info"),
        _r(2, "stalls", "engine_wide_stall", {"windows_s": [[0.5, 0.9]]}),  # before the fill
        _r(3, "replicas", "replica_slower", {"replica": "b"}),
        _r(4, "replicas", "replica_gpu_telemetry_missing", {"replica": "b"}, "info"),
        _r(5, "mbu", "decode_mbu", {}, "info"),
    ]
    incidents = join(ranked, 10.0)
    assert [[ranked[m].verdict for m in i.members] for i in incidents] == [
        ["kv_cache_exhausted", "preemption_stall"]]  # one playbook's findings never join
    assert ranked[0].incident == ranked[1].incident == 0 and ranked[2].incident is None
    assert incidents[0].contradiction is None  # a full pool and its preemptions agree


def test_same_replica_across_playbooks_joins_and_a_stuck_vs_resumed_engine_contradicts() -> None:
    ranked = [
        _r(0, "hang", "collective_mismatch", {"windows_s": [[8.0, None]]}, "critical"),
        _r(1, "stalls", "periodic_engine_stall", {"windows_s": [[8.2, 8.4], [9.0, 9.3]]}),
        _r(2, "replicas", "replica_slower", {"replica": "r2"}),
        _r(3, "gpu", "gpu_thermal_throttle", {"replica": "r2"}),
    ]
    incidents = join(ranked, 12.0)
    assert len(incidents) == 2
    stuck, hot = incidents
    assert stuck.contradiction and "collective_mismatch" in stuck.contradiction
    assert hot.replica == "r2" and hot.contradiction is None


def test_two_side_remarks_make_no_incident_and_the_threshold_holds() -> None:
    ranked = [_r(0, "stalls", "a", {"windows_s": [[0.0, 2.0]]}, "info"),
              _r(1, "memory", "b", {"windows_s": [[0.0, 2.0]]}, "info")]
    assert join(ranked, 5.0) == []
    just_under = 2.0 * JOIN_OVERLAP - 0.01
    ranked = [_r(0, "stalls", "a", {"windows_s": [[0.0, 2.0]]}),
              _r(1, "memory", "b", {"windows_s": [[2.0 - just_under, 4.0]]})]
    assert join(ranked, 5.0) == []
