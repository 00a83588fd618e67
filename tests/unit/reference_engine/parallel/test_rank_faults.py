"""Rank faults on real gloo ranks: each changes what it should, and only that.

hang -> the watchdog fires, health turns bad, every rank dumps, and the hung rank never
enqueued the collective the others are stuck in; mismatch -> the dumps differ in op and
output size at exactly one sequence id; a rank killed -> health names the failure. (slow-link,
a ratio of rank timings: test_rank_slow_link.py, in the serial part.) All bounded in time; no
rank outlives the engine.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from reference_engine.engine import Engine
from reference_engine.request import SamplingParams
from tests.unit.reference_engine.parallel.tp_support import (
    PROMPTS,
    load_dump,
    tp_config,
)


def wait_for(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def start_stuck(tmp_path: Path, tp: int, fault: str | None, timeout_s: float) -> Engine:
    eng = Engine(tp_config(tp, dump_dir=str(tmp_path), faults=[fault] if fault else [],
                           collective_timeout_s=timeout_s))
    eng.start()
    for i, prompt in enumerate(PROMPTS):
        eng.add_request(f"r{i}", prompt, SamplingParams(max_tokens=30, temperature=0.0,
                                                        ignore_eos=True), lambda o: None)
    return eng


def dumps_of(tmp_path: Path, tp: int) -> list[dict[str, Any]]:
    wait_for(lambda: all((tmp_path / f"rank_{r}").exists() for r in range(tp)), 20,
             "every rank's dump")
    return [load_dump(tmp_path / f"rank_{r}") for r in range(tp)]


def stop_and_check_clean(eng: Engine) -> None:
    pids = [r["pid"] for r in eng.executor.ranks()[1:]]
    t0 = time.monotonic()
    eng.stop()
    assert time.monotonic() - t0 < 15
    assert not eng.is_alive
    assert not [p for p in pids if Path(f"/proc/{p}").exists()], "ranks outlived the engine"


@pytest.mark.parametrize(("tp", "rank", "at_step", "timeout_s"), [(2, 1, 3, 1.5), (2, 0, 2, 1.0)])
def test_hang_trips_the_watchdog_and_the_hung_rank_is_behind(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, tp: int, rank: int, at_step: int,
        timeout_s: float) -> None:
    caplog.set_level(logging.ERROR, logger="reference_engine.parallel")
    eng = start_stuck(tmp_path, tp, f"hang:rank={rank},at_step={at_step}", timeout_s)
    try:
        wait_for(lambda: eng.health() is not None, 60, "the engine to turn unhealthy")
        dumps = dumps_of(tmp_path, tp)
        reason = eng.health() or ""
        assert eng.stats().num_steps == at_step - 1  # step N never finished
        m = eng.executor.metrics()
        assert m["collective_timeouts_total"] >= 1 and m["healthy"] == 0.0
    finally:
        stop_and_check_clean(eng)
    waiting = [r for r in range(tp) if r != rank]
    status = [d["pg_status"]["0"] for d in dumps]
    stuck_seq = status[waiting[0]]["last_enqueued_collective"]
    # The others are inside collective k (step N's header broadcast); the hung rank never
    # enqueued it.
    for r in waiting:
        assert status[r]["last_enqueued_collective"] == stuck_seq
        assert status[r]["last_completed_collective"] == stuck_seq - 1
        stuck = next(e for e in dumps[r]["entries"] if e["collective_seq_id"] == stuck_seq)
        assert stuck["state"] == "started" and stuck["time_discovered_completed_ns"] is None
        assert stuck["profiling_name"] == "gloo:broadcast"
        assert (f"rank {r} timed out in gloo:broadcast (collective seq id {stuck_seq})"
                in reason)
    assert status[rank]["last_enqueued_collective"] == stuck_seq - 1
    assert stuck_seq not in {e["collective_seq_id"] for e in dumps[rank]["entries"]}
    assert stuck_seq - 1 == (at_step - 1) * 5  # 5 collectives per step, all done before N
    lines = [r.getMessage() for r in caplog.records if "collective watchdog" in r.getMessage()]
    if rank != 0:  # rank 0 is this process: its own line is in the log
        assert len(lines) == 1 and lines[0].startswith(
            f"collective watchdog: rank 0 timed out in gloo:broadcast (collective seq id "
            f"{stuck_seq}) after ")
        assert lines[0].endswith(f" s (timeout {timeout_s:.1f} s)")
    else:
        assert lines == []  # rank 0 is the hung one: it is inside no collective


@pytest.mark.parametrize(("tp", "rank", "at_step"), [(2, 1, 2), (4, 3, 4)])
def test_mismatch_differs_in_op_and_size_at_one_sequence_id(
        tmp_path: Path, tp: int, rank: int, at_step: int) -> None:
    eng = start_stuck(tmp_path, tp, f"mismatch:rank={rank},at_step={at_step}", 1.5)
    try:
        wait_for(lambda: eng.health() is not None, 90, "the engine to turn unhealthy")
        dumps = dumps_of(tmp_path, tp)
    finally:
        stop_and_check_clean(eng)
    by_seq = [{e["collective_seq_id"]: e for e in d["entries"]} for d in dumps]
    common = set.intersection(*(set(s) for s in by_seq))
    differing = [seq for seq in sorted(common)
                 if len({(s[seq]["profiling_name"], str(s[seq]["output_sizes"]))
                         for s in by_seq}) > 1]
    assert len(differing) == 1, differing
    seq = differing[0]
    odd = by_seq[rank][seq]
    assert odd["profiling_name"] == "gloo:all_gather"
    assert odd["output_sizes"] == [[tp, *odd["input_sizes"][0]]]
    for r in range(tp):
        if r != rank:
            assert by_seq[r][seq]["profiling_name"] == "gloo:all_reduce"
            assert by_seq[r][seq]["output_sizes"] == by_seq[r][seq]["input_sizes"]
        assert by_seq[r][seq]["state"] == "started"  # nobody got out of it
    # It is step N's first all-reduce: after the header broadcast of step N.
    assert by_seq[rank][seq - 1]["profiling_name"] == "gloo:broadcast"
    assert seq - 1 == (at_step - 1) * 5 + 1


# The step loop dies with the collective that lost its peer, as an engine thread does.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_rank_that_dies_turns_health_bad_naming_the_failure(tmp_path: Path) -> None:
    eng = start_stuck(tmp_path, 2, None, 30.0)
    try:
        wait_for(lambda: eng.stats().num_steps >= 2, 60, "the engine to run")
        worker = eng.executor.ranks()[1]["pid"]
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: eng.health() is not None, 30, "the engine to notice")
        reason = eng.health() or ""
        # Either the collective that lost its peer or the exit of the rank itself.
        assert ("Connection closed by peer" in reason or "failed" in reason
                or f"rank 1 (pid {worker}) exited with code -9" in reason), reason
        assert "collective watchdog" not in reason  # not a timeout: nothing waited 30 s
    finally:
        stop_and_check_clean(eng)
