"""The live watch's triggers (infbench/loadgen/telemetry/watch.py), driven tick by tick on fake pools.

Times are chosen per test; thresholds differ between tests so no rule fits one case only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest

from infbench.loadgen.run.types import LiveStats
from infbench.loadgen.telemetry.watch import (
    MIN_ANSWERS,
    Trigger,
    Watch,
    Watcher,
    WatchSettings,
    start_watcher,
)

S = 1_000_000_000


@dataclass(eq=False)  # hashable by identity, as the pool's exchanges are
class Ex:
    body_bytes: int = 0
    last_ns: int = 0


@dataclass
class FakePool:
    live: set[Any] = field(default_factory=set)
    last_read_ns: int = 0


class Counters:
    def __init__(self) -> None:
        self.done, self.errors, self.by_class = 0, 0, {}

    def __call__(self) -> tuple[int, int, dict[str, int]]:
        return self.done, self.errors, dict(self.by_class)


def watcher(settings: WatchSettings, pools: list[FakePool], names: list[str | None] | None = None,
            counters: Counters | None = None,
            samples: dict[str, deque[tuple[float, int]]] | None = None,
            first_ms: list[float] | None = None) -> tuple[Watcher, list[Trigger]]:
    fired: list[Trigger] = []
    w = Watcher(settings, pools, names or [None] * len(pools), counters or Counters(), samples,
                fired.append, first_ms if first_ms is not None else [])
    w._start_ns = 0
    return w, fired


@pytest.mark.parametrize(("stall_s", "streams"), [(1.0, 4), (0.4, 1), (2.5, 16)])
def test_every_open_stream_silent_past_the_threshold_fires_once(stall_s: float, streams: int) -> None:
    pool = FakePool({Ex(100, 10 * S) for _ in range(streams)})
    w, fired = watcher(WatchSettings(stall_s=stall_s), [pool])
    w.check(10 * S + int((stall_s - 0.05) * S))
    assert fired == []
    for k in range(5):  # still silent: one incident, one trigger
        w.check(10 * S + int((stall_s + 0.1 * k) * S))
    assert [t.kind for t in fired] == ["engine_stopped"]
    assert fired[0].detail["open_streams"] == streams
    assert fired[0].detail["silent_s"] == pytest.approx(stall_s, abs=1e-6)


def test_one_stream_still_streaming_is_not_an_engine_stop() -> None:
    # A private stall: three streams silent for 3 s, one receiving every 50 ms.
    silent = [Ex(100, 1 * S) for _ in range(3)]
    alive = Ex(100, 1 * S)
    pool = FakePool(set(silent) | {alive})
    w, fired = watcher(WatchSettings(stall_s=1.0), [pool])
    for k in range(60):
        now = 1 * S + k * 50_000_000
        alive.last_ns = now
        w.check(now)
    assert fired == []


def test_requests_waiting_for_a_first_byte_alone_do_not_fire() -> None:
    # A long prefill with nothing streaming: no stream has stopped.
    pool = FakePool({Ex(0, 0), Ex(0, 0)}, last_read_ns=2 * S)
    w, fired = watcher(WatchSettings(stall_s=0.5), [pool])
    w.check(9 * S)
    assert fired == []


def test_an_ended_stream_counts_as_progress_and_the_watch_rearms_after_tokens_flow() -> None:
    ex = Ex(100, 5 * S)
    pool = FakePool({ex}, last_read_ns=5_500_000_000)  # another stream ended at 5.5 s
    w, fired = watcher(WatchSettings(stall_s=0.8), [pool])
    w.check(6_200_000_000)
    assert fired == []  # 0.7 s since the last byte of the ended stream
    w.check(6_400_000_000)
    assert len(fired) == 1
    ex.last_ns = 7 * S  # tokens again: re-armed
    w.check(7_100_000_000)
    w.check(8 * S)
    assert len(fired) == 2 and fired[1].detail["silent_s"] == pytest.approx(1.0)


def test_each_replica_is_watched_on_its_own() -> None:
    a, b = FakePool({Ex(10, 1 * S)}), FakePool({Ex(10, 1 * S)})
    w, fired = watcher(WatchSettings(stall_s=1.5), [a, b], ["a", "b"])
    for k in range(30):
        now = 1 * S + k * 100_000_000
        next(iter(a.live)).last_ns = now  # a streams; b is stuck
        w.check(now)
    assert [(t.kind, t.replica) for t in fired] == [("engine_stopped", "b")]


@pytest.mark.parametrize(("n", "window", "errors"), [(5, 5.0, 6), (3, 2.0, 3), (10, 8.0, 14)])
def test_error_burst_needs_n_errors_that_are_half_of_what_ended(n: int, window: float,
                                                                errors: int) -> None:
    c = Counters()
    w, fired = watcher(WatchSettings(burst_errors=n, burst_window_s=window), [], counters=c)
    t = 0
    for _ in range(40):  # healthy: completions only
        t += S // 4
        c.done += 2
        w.check(t)
    for _ in range(errors):  # a burst, faster than the window
        t += int(window * S / (2 * errors))
        c.errors += 1
        c.by_class["http_500"] = c.errors
        w.check(t)
    assert [x.kind for x in fired] == ["error_burst"]
    assert fired[0].detail["errors"] >= n and fired[0].detail["top_class"] == "http_500"


def test_errors_spread_thinly_among_successes_are_no_burst() -> None:
    c = Counters()
    w, fired = watcher(WatchSettings(burst_errors=5, burst_window_s=5.0), [], counters=c)
    t = 0
    for k in range(200):  # an error every third tick, for 50 s: 6-7 in every window
        t += S // 4
        c.done += 1
        if k % 3 == 0:
            c.errors += 1
        w.check(t)
    assert fired == []


def _samples(itl: dict[str, float], conc: dict[str, int], n: int = 20) -> dict[str, deque[tuple[float, int]]]:
    return {k: deque([(v, conc[k])] * n, maxlen=64) for k, v in itl.items()}


@pytest.mark.parametrize(("ratio", "slow"), [(2.0, 2.6), (1.3, 1.45), (3.0, 3.4)])
def test_a_replica_slower_than_its_peers_at_equal_load_departs(ratio: float, slow: float) -> None:
    smp = _samples({"r0": 10.0, "r1": 10.0 * slow, "r2": 11.0}, {"r0": 4, "r1": 4, "r2": 5})
    w, fired = watcher(WatchSettings(depart_ratio=ratio), [], samples=smp)
    w.check(S)
    w.check(2 * S)
    assert [(t.kind, t.replica) for t in fired] == [("replica_departs", "r1")]


def test_a_busier_replica_is_not_a_departure() -> None:
    # r1 carries three times the concurrency: slower because busier, not broken.
    smp = _samples({"r0": 10.0, "r1": 25.0}, {"r0": 2, "r1": 6})
    w, fired = watcher(WatchSettings(depart_ratio=2.0), [], samples=smp)
    w.check(S)
    assert fired == []


def test_too_few_samples_decide_nothing() -> None:
    smp = _samples({"r0": 10.0, "r1": 50.0}, {"r0": 3, "r1": 3}, n=5)
    w, fired = watcher(WatchSettings(depart_min_samples=12), [], samples=smp)
    w.check(S)
    assert fired == []


@pytest.mark.parametrize("bad", [WatchSettings(stall_s=0), WatchSettings(burst_errors=0),
                                 WatchSettings(depart_ratio=1.0)])
def test_bad_settings_are_refused(bad: WatchSettings) -> None:
    with pytest.raises(ValueError):
        bad.validate()


def test_a_median_ahead_with_overlapping_spreads_is_not_a_departure() -> None:
    # r1's median is 3x, but over a third of its requests are as fast as its peers': one slow
    # tenant's long prompts landing there, not a broken replica.
    fast = [(10.0 + 0.1 * k, 4) for k in range(10)]
    slow = [(30.0, 4)] * 10
    smp = {"r0": deque(fast * 2, maxlen=64), "r1": deque(fast[:6] + slow, maxlen=64),
           "r2": deque(fast * 2, maxlen=64)}
    w, fired = watcher(WatchSettings(depart_ratio=1.3), [], samples=smp)
    w.check(S)
    assert fired == []


@pytest.mark.parametrize(("first_max_ms", "stall_s", "waiting"), [(40.0, 1.0, 4), (900.0, 0.5, 2),
                                                                  (120.0, 2.0, 7)])
def test_an_engine_stopped_between_waves_fires_once_its_waiting_outlasts_the_runs_first_chunks(
        first_max_ms: float, stall_s: float, waiting: int) -> None:
    """A closed loop's wave ended at 10 s and the next one was sent: no stream is open, every
    request waits for its first byte, and nothing arrives."""
    firsts = [first_max_ms * f for f in (0.3, 0.5, 0.45, 1.0, 0.6, 0.4, 0.7, 0.55, 0.5)]
    pool = FakePool({Ex(0, 0) for _ in range(waiting)}, last_read_ns=10 * S)
    w, fired = watcher(WatchSettings(stall_s=stall_s), [pool], first_ms=firsts)
    limit_s = max(stall_s, 4 * first_max_ms / 1e3)
    t = 10 * S + 20_000_000  # first seen waiting 20 ms after the wave was sent
    w.check(t)
    w.check(t + int((limit_s - 0.05) * S))
    assert fired == []
    for k in range(4):
        w.check(t + int((limit_s + 0.1 * k) * S))
    assert [f.kind for f in fired] == ["engine_stopped"]
    d = fired[0].detail
    assert d["open_streams"] == 0 and d["waiting_for_first_byte"] == waiting
    assert d["longest_wait_s"] == pytest.approx(limit_s, abs=1e-6)
    assert d["first_chunk_max_ms"] == first_max_ms and d["wait_threshold_s"] == pytest.approx(limit_s)
    assert "no first byte" in fired[0].describe()


def test_a_wait_the_run_has_seen_before_is_not_a_stop() -> None:
    # first chunks up to 2.5 s (a long queue): waiting 6 s with nothing streaming is within 4x of that
    pool = FakePool({Ex(0, 0) for _ in range(3)}, last_read_ns=1 * S)
    w, fired = watcher(WatchSettings(stall_s=1.0), [pool], first_ms=[800.0] * 10 + [2500.0])
    for k in range(61):
        w.check(1 * S + k * 100_000_000)
    assert fired == []


def test_without_enough_finished_requests_a_long_wait_decides_nothing() -> None:
    pool = FakePool({Ex(0, 0)}, last_read_ns=0)
    w, fired = watcher(WatchSettings(stall_s=0.5), [pool], first_ms=[30.0] * 7)
    for k in range(50):
        w.check(k * 200_000_000)
    assert fired == []


def test_requests_sent_into_a_stop_are_the_same_incident_until_a_byte_arrives() -> None:
    streams = {Ex(100, 2 * S) for _ in range(3)}
    pool = FakePool(set(streams), last_read_ns=2 * S)
    w, fired = watcher(WatchSettings(stall_s=1.0), [pool], first_ms=[50.0] * 20)
    w.check(3_100_000_000)
    assert len(fired) == 1 and fired[0].detail["open_streams"] == 3
    # the stranded streams time out (no byte: a timeout is no progress) and new requests wait
    pool.live = {Ex(0, 0) for _ in range(3)}
    for k in range(1, 80):
        w.check(3_100_000_000 + k * 100_000_000)
    assert len(fired) == 1
    # the engine answers again, then stops between waves: a new incident
    pool.live = set()
    pool.last_read_ns = 12 * S
    w.check(12 * S + 50_000_000)
    pool.live = {Ex(0, 0) for _ in range(2)}
    for k in range(1, 20):
        w.check(12 * S + 50_000_000 + k * 100_000_000)
    assert [f.detail["open_streams"] for f in fired] == [3, 0]


@pytest.mark.parametrize(("fast_ms", "slow_ms", "stall_s"), [(50.0, 3000.0, 1.0), (200.0, 1500.0, 0.6)])
def test_a_replica_stopped_between_waves_is_judged_on_its_own_first_chunks_not_a_slow_peers(
        fast_ms: float, slow_ms: float, stall_s: float) -> None:
    """Fleet: `a` answers in fast_ms, `b` queues for slow_ms. Both have requests waiting and no
    stream open. `a` has waited 4x its own longest TTFT (and stall_s): a stop, though the fleet's
    longest TTFT (b's) would put the bar at 4 x slow_ms; `b`, waiting as long, is within 4x of
    its own and is not."""
    own = {"a": deque([fast_ms * f for f in (0.5, 0.8, 1.0, 0.7, 0.6, 0.9, 0.75, 0.65)], maxlen=500),
           "b": deque([slow_ms * f for f in (0.5, 0.8, 1.0, 0.7, 0.6, 0.9, 0.75, 0.65)], maxlen=500)}
    run_wide = [*own["a"], *own["b"]]
    pools = [FakePool({Ex(0, 0) for _ in range(3)}, last_read_ns=5 * S),
             FakePool({Ex(0, 0) for _ in range(2)}, last_read_ns=5 * S)]
    fired: list[Trigger] = []
    w = Watcher(WatchSettings(stall_s=stall_s), pools, ["a", "b"], Counters(), None, fired.append,
                run_wide, own)
    w._start_ns = 0
    limit_a = max(stall_s, 4 * fast_ms / 1e3)
    assert limit_a < 4 * slow_ms / 1e3  # the run-wide bar would not be reached in this wait
    t = 5 * S
    w.check(t)
    for k in range(1, 6):
        w.check(t + int((limit_a + 0.05 * k) * S))
    assert [(f.kind, f.replica) for f in fired] == [("engine_stopped", "a")]
    assert fired[0].detail["first_chunk_max_ms"] == pytest.approx(fast_ms)


def test_a_replica_with_too_few_answers_of_its_own_is_judged_on_the_runs() -> None:
    own = {"a": deque([40.0] * 3, maxlen=500)}  # below MIN_ANSWERS
    pool = FakePool({Ex(0, 0)}, last_read_ns=2 * S)
    fired: list[Trigger] = []
    w = Watcher(WatchSettings(stall_s=0.5), [pool], ["a"], Counters(), None, fired.append,
                [40.0] * 8 + [900.0], own)
    w._start_ns = 0
    for k in range(30):  # 2.9 s of waiting: past 4 x 40 ms, within 4 x 900 ms
        w.check(2 * S + k * 100_000_000)
    assert fired == []


@pytest.mark.parametrize(("empty", "first_ms", "stall_s"), [((0,), 25.0, 1.0), ((2, 5), 140.0, 0.8)])
def test_a_stop_between_waves_after_streams_with_no_text_still_fires(
        empty: tuple[int, ...], first_ms: float, stall_s: float) -> None:
    """Round R72, a real vLLM: the first of the 8 requests finished before the engine core was
    stopped streamed 96 tokens that all decoded to empty text (no first content, no TTFT). The
    stop came between waves: the next 4 requests waited for a first byte and timed out, wave
    after wave, and the watch, counting 7 TTFTs against its 8, never fired `engine_stopped`.
    Every answered request is a yardstick for a wait for a first byte, with or without text."""
    stats = LiveStats()
    for k in range(MIN_ANSWERS):
        send = k * S
        chunk = send + int(first_ms * 1e6 * (0.6 + 0.05 * k))
        stats.finished(send, chunk, None if k in empty else chunk + 1_000_000, 2e6, None, 4)
    assert stats.done == MIN_ANSWERS and len(stats.recent_ttft_ms) == MIN_ANSWERS - len(empty)
    pool = FakePool({Ex(0, 0) for _ in range(4)}, last_read_ns=10 * S)
    fired: list[Trigger] = []
    w = start_watcher(Watch(WatchSettings(stall_s=stall_s), fired.append), [pool], [None],
                      stats, fleet=False)
    w._start_ns = 0
    t = 10 * S + 10_000_000
    for k in range(int(stall_s * 10) + 12):
        w.check(t + k * 100_000_000)
    assert [f.kind for f in fired] == ["engine_stopped"]
    d = fired[0].detail
    assert d["open_streams"] == 0 and d["waiting_for_first_byte"] == 4
    assert d["longest_wait_s"] >= stall_s and d["first_chunk_max_ms"] == pytest.approx(
        max(first_ms * (0.6 + 0.05 * k) for k in range(MIN_ANSWERS)), rel=1e-3)


def test_live_stats_keep_first_chunks_per_replica_and_ttfts_only_where_there_was_text() -> None:
    stats = LiveStats()
    stats.finished(0, 30_000_000, 30_000_000, 1e6, "a", 2)
    stats.finished(0, 50_000_000, None, None, "b", 3)
    stats.finished(0, None, None, None, "b", 3)  # an answer with no chunk at all (empty body)
    assert stats.done == 3 and list(stats.recent_ttft_ms) == [30.0]
    assert list(stats.recent_first_chunk_ms) == [30.0, 50.0]
    assert {k: list(v) for k, v in stats.replica_first_chunk_ms.items()} == {"a": [30.0], "b": [50.0]}
    assert {k: list(v) for k, v in stats.replica_recent.items()} == {"a": [(1.0, 2)]}
