"""The `every_s` periodic stall keeps a fixed schedule: a late stall does not delay the next."""

from __future__ import annotations

import pytest

from reference_engine.faults import Faults


@pytest.mark.parametrize(("every", "step"), [(0.45, 0.006), (1.1, 0.0137), (2.5, 0.021)])
def test_stalls_stay_on_the_schedule_when_steps_come_late(every: float, step: float) -> None:
    faults = Faults([f"periodic-stall:every_s={every},duration_ms=50"])
    now, fired = 100.0, []
    for i in range(int(12 * every / step)):
        if faults.stall_seconds(i, now) > 0:
            fired.append(now)
            now += 0.05
        # every 7th step the host is descheduled for 40% of a period
        now += step + (0.4 * every if i % 7 == 3 else 0.0)
    due = [100.0 + k * every for k in range(1, int(now - 100.0 + 1) * 3)]
    # Each stall is the first step at or after a due time, never more than one step plus
    # one host pause late, and the lateness does not accumulate.
    for t in fired:
        k = max(d for d in due if d <= t + 1e-9)
        assert t - k <= step + 0.05 + 0.4 * every + 1e-9
    assert len(fired) >= 8


def test_due_times_missed_while_idle_are_skipped_not_replayed() -> None:
    faults = Faults(["periodic-stall:every_s=2,duration_ms=100"])
    assert faults.stall_seconds(1, 10.0) == 0.0     # schedule: 12, 14, 16, ...
    assert faults.stall_seconds(2, 12.5) == 0.1
    assert faults.stall_seconds(3, 21.3) == 0.1     # idle from 12.5 to 21.3: one stall
    assert faults.stall_seconds(4, 21.4) == 0.0     # not another for 14, 16, 18, 20
    assert faults.stall_seconds(5, 21.99) == 0.0
    assert faults.stall_seconds(6, 22.0) == 0.1     # back on the 2 s grid
