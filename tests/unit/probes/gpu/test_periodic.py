"""The sampling thread: on schedule, stops promptly, survives nothing it should not."""

from __future__ import annotations

import time

import pytest

from probes.gpu.periodic import PeriodicSampler, to_run_axis


def test_samples_on_an_absolute_schedule() -> None:
    stamps: list[int] = []

    def sample(t: int) -> list[dict]:
        stamps.append(t)
        return [{"t_ns": t}]

    p = PeriodicSampler(sample, 0.05)
    p.start()
    time.sleep(0.52)
    t_stop = time.monotonic_ns()
    rows = p.stop()
    assert time.monotonic_ns() - t_stop < 0.1e9  # stop does not wait out an interval
    assert 8 <= len(rows) <= 12
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.05e9, rel=0.25)


def test_a_slow_read_does_not_make_a_burst() -> None:
    stamps: list[int] = []

    def sample(t: int) -> list[dict]:
        stamps.append(t)
        if len(stamps) == 2:
            time.sleep(0.3)  # a read that takes 6 intervals
        return []

    p = PeriodicSampler(sample, 0.05)
    p.start()
    time.sleep(0.6)
    p.stop()
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert min(gaps[2:]) > 0.03e9  # after the slow read: back on a 50 ms beat, no catch-up


def test_an_exception_ends_sampling_and_is_kept() -> None:
    calls = []

    def sample(t: int) -> list[dict]:
        calls.append(t)
        raise OSError("device vanished")

    p = PeriodicSampler(sample, 0.01)
    p.start()
    time.sleep(0.1)
    assert p.stop() == [] and len(calls) == 1
    assert p.errors == ["OSError: device vanished"]


def test_bad_interval_and_axis() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        PeriodicSampler(lambda t: [], 0)
    assert to_run_axis([{"t_ns": 1500, "gpu": 0}], 1000) == [{"t_ns": 500, "gpu": 0}]


def test_the_thread_counts_its_own_cpu_time() -> None:
    def busy(t: int) -> list[dict]:
        end = time.thread_time() + 0.01  # 10 ms of CPU per sample, on this thread's clock
        while time.thread_time() < end:
            pass
        return []

    p = PeriodicSampler(busy, 0.05)
    p.start()
    time.sleep(0.4)
    p.stop()
    assert p.samples >= 3
    assert 0.01 * p.samples <= p.cpu_s < 0.01 * p.samples + 0.05
