"""The host's pauses of a run from a real store (HOST_PAUSES_SQL): each host-late step's excess
over the median step of its shape that the host did not delay, and when it ended on the run's
axis; and which stall findings lie wholly on host-late steps."""

from __future__ import annotations

import pytest

from infbench.store import create_run, finish_run
from infbench.store.writer import insert_batch, to_arrow
from tests.support.host_pauses import host_late_steps, host_pauses_sql, the_hosts
from tests.support.stores import new_store


def _store(tmp_path, t0_ns: int, steps: list[tuple[float, float, int, int, str | None]]):
    """steps: (start_s, end_s, prefill_tokens, decode_seqs, fault) on the engine's monotonic clock."""
    con = new_store(tmp_path / "p.duckdb")
    create_run(con, run_id="r", config={}, target_url="http://127.0.0.1:1", model="m",
               endpoint="completions", t0_monotonic_ns=t0_ns)
    cols: dict[str, list] = {k: [] for k in ("step_id", "start_s", "end_s", "prefill_tokens",
                                             "decode_seqs", "fault")}
    for i, row in enumerate(steps):
        for k, v in zip(cols, (i + 1, *row), strict=True):
            cols[k].append(v)
    insert_batch(con, "r", "engine_steps", to_arrow("engine_steps", cols))
    finish_run(con, "r", status="completed")
    return con


@pytest.mark.parametrize(("step_s", "late_s", "t0_s"), [(0.004, 0.030, 100.0), (0.013, 0.250, 7.5)])
def test_excess_over_the_median_step_of_its_shape(tmp_path, step_s: float, late_s: float,
                                                   t0_s: float) -> None:
    steps: list[tuple[float, float, int, int, str | None]] = []
    t = t0_s + 1.0
    for i in range(21):  # decode steps of 4 sequences, one of them host-late
        d = late_s if i == 10 else step_s * (1.6 if i % 3 == 2 else 1.0)  # median step_s, mean above
        steps.append((t, t + d, 0, 4, "host-late" if i == 10 else None))
        t += d
    late_end = steps[10][1]
    # a prefill shape the host delayed and never ran otherwise: counted whole
    steps.append((t, t + 0.05, 512, 0, "kv-pressure,host-late"))
    # another shape, not late: never a pause, whatever its length
    steps.append((t + 0.05, t + 0.55, 64, 4, None))
    con = _store(tmp_path, int(t0_s * 1e9), steps)
    rows = sorted(con.execute(host_pauses_sql("r")).fetchall())
    assert len(rows) == 2
    (e1, h1), (e2, h2) = rows
    assert h1 == pytest.approx(late_s - step_s)
    assert e1 == pytest.approx((late_end - t0_s) * 1e9, abs=1)
    assert h2 == pytest.approx(0.05) and e2 == pytest.approx((t + 0.05 - t0_s) * 1e9, abs=1)
    con.close()
    got = sorted(host_late_steps(tmp_path / "p.duckdb"))
    want = [(late_end - late_s - t0_s, late_end - t0_s), (t - t0_s, t + 0.05 - t0_s)]
    assert [x for w in got for x in w] == pytest.approx([x for w in want for x in w], abs=1e-6)


def test_a_run_id_is_quoted_not_spliced(tmp_path) -> None:
    con = _store(tmp_path, 0, [(0.0, 0.01, 0, 1, None)])
    assert con.execute(host_pauses_sql("r' OR '1'='1")).fetchall() == []
    assert con.execute(host_pauses_sql("r")).fetchall() == []


def test_a_stall_is_the_hosts_only_when_every_pause_lies_on_a_host_late_step() -> None:
    late = [(1.0, 1.3), (5.0, 5.2)]
    assert the_hosts([[1.1, 1.25], [5.05, 5.21]], late)
    assert not the_hosts([[1.1, 1.25], [3.0, 3.2]], late)  # one pause on no host-late step
    assert not the_hosts([], late) and not the_hosts([[1.1, 1.2]], [])
