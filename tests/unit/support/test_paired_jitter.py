"""The batching jitter between a re-run and its twin (tests/support/paired_jitter.py) from a
real store: requests paired by schedule position, TTFT differences summed per busy period of
the twin, the standard error of their mean from those sums; runs of different schedules refused."""

from __future__ import annotations

import math

import pytest

from infbench.store import create_run, finish_run
from infbench.store.writer import insert_batch, to_arrow
from tests.support.paired_jitter import jitter_se
from tests.support.stores import new_store

T0 = 5_000_000_000  # the run's t0 on the monotonic clock, ns


def _run(con, run_id: str, sends_s: list[float], ttfts_ms: list[float], periods: list[tuple[float, float]],
         *, late_ms: float = 0.0, extra: bool = False) -> None:
    """One run: requests intended at `sends_s` (run axis) and sent `late_ms` after, and the
    engine busy over `periods` (run axis), as steps of 10 ms. `extra`: a warm-up request and a
    failed one, which the pairing must not see."""
    create_run(con, run_id=run_id, config={}, target_url="http://127.0.0.1:1", model="m",
               endpoint="completions", t0_monotonic_ns=T0)
    req: dict[str, list] = {k: [] for k in ("request_idx", "phase", "intended_send_ns", "send_ns",
                                            "first_content_ns", "error_class")}
    rows = [("measure", s, t, None) for s, t in zip(sends_s, ttfts_ms, strict=True)]
    if extra:
        rows += [("warmup", 0.0, 1.0, None), ("measure", 0.5, 999.0, "http_error")]
    for i, (phase, s, t, err) in enumerate(rows):
        send = int(s * 1e9 + late_ms * 1e6)
        for k, v in zip(req, (i, phase, int(s * 1e9), send, send + int(t * 1e6), err), strict=True):
            req[k].append(v)
    insert_batch(con, run_id, "requests", to_arrow("requests", req))
    steps: dict[str, list] = {k: [] for k in ("step_id", "start_s", "end_s", "prefill_tokens", "decode_seqs")}
    for a, b in periods:
        t = a
        while t < b - 1e-9:
            for k, v in zip(steps, (len(steps["step_id"]) + 1, T0 / 1e9 + t, T0 / 1e9 + t + 0.01, 0, 1),
                            strict=True):
                steps[k].append(v)
            t += 0.01
    insert_batch(con, run_id, "engine_steps", to_arrow("engine_steps", steps))
    finish_run(con, run_id, status="completed")


@pytest.mark.parametrize(("sizes", "shift_ms"), [((4, 2, 6), 30.0), ((1, 5, 3, 7), 7.5)])
def test_standard_error_from_the_busy_periods_sums(tmp_path, sizes: tuple[int, ...], shift_ms: float) -> None:
    db = tmp_path / "j.duckdb"
    con = new_store(db)
    sends: list[float] = []
    periods: list[tuple[float, float]] = []
    for k, n in enumerate(sizes):  # burst k at 2k + 1 s, its requests 1 ms apart
        at = 2.0 * k + 1.0
        sends += [at + i * 1e-3 for i in range(n)]
        periods.append((at + 0.5e-3, at + 0.3))
    base = [40.0 + 3.0 * i for i in range(len(sends))]
    # the re-run's burst k reads shift * (k - 1) slower per request: bursts differ, requests
    # within one move together
    per_req = [shift_ms * (k - 1) for k, n in enumerate(sizes) for _ in range(n)]
    _run(con, "twin", sends, base, periods, extra=True)
    _run(con, "rerun", sends, [b + d for b, d in zip(base, per_req, strict=True)], [], late_ms=2.0)
    con.close()
    n, c = len(sends), len(sizes)
    mean = sum(per_req) / n
    sums = [n_k * shift_ms * (k - 1) for k, n_k in enumerate(sizes)]
    want = math.sqrt(sum((s - n_k * mean) ** 2 for s, n_k in zip(sums, sizes, strict=True)) * c / (c - 1)) / n
    assert want > 0
    assert jitter_se(db, "twin", "rerun") == pytest.approx(want, rel=1e-9)


def test_one_busy_period_or_equal_runs_give_no_spread(tmp_path) -> None:
    db = tmp_path / "j.duckdb"
    con = new_store(db)
    sends = [1.0, 1.2, 1.4]
    _run(con, "twin", sends, [50.0, 60.0, 70.0], [(0.9, 2.0)])
    _run(con, "rerun", sends, [80.0, 10.0, 90.0], [])
    _run(con, "same", sends, [50.0, 60.0, 70.0], [])
    con.close()
    assert jitter_se(db, "twin", "rerun") == 0.0  # one cluster: nothing to estimate from
    assert jitter_se(db, "twin", "same") == 0.0


def test_runs_of_different_schedules_are_refused(tmp_path) -> None:
    db = tmp_path / "j.duckdb"
    con = new_store(db)
    _run(con, "twin", [1.0, 2.0, 3.0], [50.0] * 3, [(1.0, 1.1), (2.0, 2.1), (3.0, 3.1)])
    _run(con, "moved", [1.0, 2.002, 3.0], [50.0] * 3, [])
    _run(con, "short", [1.0, 2.0], [50.0] * 2, [])
    con.close()
    with pytest.raises(ValueError, match="did not send twin's schedule: an offset 2.000 ms apart"):
        jitter_se(db, "twin", "moved")
    with pytest.raises(ValueError, match="short answered 2 requests, its twin twin 3"):
        jitter_se(db, "twin", "short")
