"""Live watch: while the load runs, notice an incident as it happens and say so at once, so
that evidence which disappears later (a stuck engine's stacks, its /metrics at that moment)
can be captured while it still exists.

Three triggers, each read from what the client already keeps (no work on the read path):
- `engine_stopped`: on one target, streams are open and none has received a byte for
  `stall_s` (every stream stopped at once: the engine, not a request); or no stream is open
  and the requests waiting for their first byte have waited `WAIT_FACTOR` x the longest
  recent time to a first chunk on that target (finished requests'; in a fleet the replica's
  own, from `MIN_ANSWERS` of its requests on; the run's before that) and `stall_s`, with no
  byte from anything meanwhile: an engine that
  stops between one wave of requests and the next (a closed loop's requests end together and
  the next ones are sent together) leaves no stream to stop, and a prefill or a queue that
  long has not been seen in the run;
- `error_burst`: at least `burst_errors` requests failed within `burst_window_s`, and they
  are at least half of the requests that ended since the first of them;
- `replica_departs` (fleet runs): one replica's recent ITL median is `depart_ratio` x its
  peers', its lower quartile above their upper quartile (apart, not one slow request), while
  it carries about the same concurrency (at equal load, so it is slower, not busier).

A trigger fires once per incident: it re-arms when a byte arrives again (stop: not when the
stranded requests time out and others are sent into the same stop), when a window
passes without a burst, or when the replica comes back within the ratio. `on_trigger` is
called on the event loop and must not block (the capture side hands work to a thread).
The watcher never blocks the load loop: one tick every `tick_s` reads a few numbers; a tick
that ran late (the client's own loop was stalled) decides nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

TRIGGERS = ("engine_stopped", "error_burst", "replica_departs")
_DEPART_EVERY_NS = 1_000_000_000
# With nothing streaming, requests waiting this many times the longest recent time to a first
# chunk (finished requests', queueing included) have met something the run has not shown
# before; below MIN_ANSWERS finished requests there is no yardstick (a cold start's first
# prefill can be long). A first chunk, not a first token: what the waiting lack is a byte.
WAIT_FACTOR = 4.0
MIN_ANSWERS = 8


@dataclass(frozen=True)
class WatchSettings:
    stall_s: float = 1.0          # no byte on any open stream of a target for this long
    burst_errors: int = 5         # failed requests within the window...
    burst_window_s: float = 5.0   # ...that are at least half of those that ended in it
    depart_ratio: float = 1.3     # a replica's ITL p50 against its peers', at equal load
    depart_min_samples: int = 12  # finished requests per replica before comparing
    tick_s: float = 0.1

    def validate(self) -> None:
        if not self.stall_s > 0:
            raise ValueError(f"watch-stall: must be > 0 seconds, not {self.stall_s:g}")
        if self.burst_errors < 1 or not self.burst_window_s > 0:
            raise ValueError("watch: an error burst needs at least 1 error in a window > 0 s")
        if not self.depart_ratio > 1:
            raise ValueError(f"watch: departure ratio must be > 1, not {self.depart_ratio:g}")


@dataclass
class Trigger:
    kind: str                      # one of TRIGGERS
    at_ns: int                     # monotonic, when the watcher saw it
    replica: str | None            # the target it concerns (None: one target, or the fleet)
    detail: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        where = f" on {self.replica}" if self.replica else ""
        d = self.detail
        if self.kind == "engine_stopped" and not d["open_streams"]:
            return (f"no first byte for any of {d['waiting_for_first_byte']} waiting request(s)"
                    f"{where} for {d['longest_wait_s']:.1f} s ({WAIT_FACTOR:g}x the run's longest "
                    f"recent time to a first chunk, {d['first_chunk_max_ms']:.0f} ms), nothing "
                    f"else received")
        if self.kind == "engine_stopped":
            return (f"no token on any of {d['open_streams']} open stream(s){where} for "
                    f"{d['silent_s']:.1f} s")
        if self.kind == "error_burst":
            return (f"{d['errors']} of {d['ended']} requests failed within "
                    f"{d['window_s']:g} s ({d['top_class']})")
        return (f"{self.replica}: ITL p50 {d['itl_p50_ms']:.1f} ms vs its peers' "
                f"{d['peers_itl_p50_ms']:.1f} ms at concurrency {d['concurrency']:.1f} vs "
                f"{d['peers_concurrency']:.1f}")


class LivePool(Protocol):
    """What the watcher reads of a connection pool (`http1.Pool`)."""

    live: set[Any]        # open exchanges: .body_bytes, .last_ns, .sent_ns
    last_read_ns: int     # the last byte of any exchange that has ended


class Watcher:
    """Owns: its trigger list and re-arm state. Reads the pools, the live stats' error and
    completion counters, and per replica its finished requests' (mean ITL ms, concurrency at
    send), newest last (`LiveStats.replica_recent`); writes nothing the run records."""

    def __init__(self, settings: WatchSettings, pools: Sequence[LivePool], names: Sequence[str | None],
                 counters: Callable[[], tuple[int, int, dict[str, int]]],
                 replica_samples: dict[str, deque[tuple[float, int]]] | None,
                 on_trigger: Callable[[Trigger], None],
                 recent_first_chunk_ms: Sequence[float] = (),
                 replica_first_chunk_ms: dict[str, deque[float]] | None = None) -> None:
        self.settings = settings
        self._pools, self._names = list(pools), list(names)
        self._counters = counters
        self._samples = replica_samples
        self._on_trigger = on_trigger
        self.triggers: list[Trigger] = []
        self._stopped: list[int | None] = [None] * len(self._pools)  # a stop's last byte, while it lasts
        self._bursting = False
        self._departed: set[str] = set()
        self._history: deque[tuple[int, int, int, dict[str, int]]] = deque()
        self._start_ns = 0
        self._depart_checked_ns = -_DEPART_EVERY_NS
        self._first_ms = recent_first_chunk_ms  # live: the runner appends finished requests'
        self._replica_first_ms = replica_first_chunk_ms  # live, per replica name (fleet runs)
        # per pool: each open exchange without a byte yet -> the tick it was first seen
        self._waiting: list[dict[Any, int]] = [{} for _ in self._pools]

    async def run(self) -> None:
        self._start_ns = time.monotonic_ns()
        tick_ns = int(self.settings.tick_s * 1e9)
        due = time.monotonic_ns()
        while True:
            due += tick_ns
            await asyncio.sleep(max(due - time.monotonic_ns(), 0) / 1e9)
            now = time.monotonic_ns()
            if now - due > int(self.settings.stall_s * 1e9 / 2):
                due = now  # the client itself was stalled: its view of the streams is stale
                continue
            self.check(now)

    def check(self, now: int) -> None:
        """One look at the run (also called directly by tests with a chosen `now`)."""
        for i, pool in enumerate(self._pools):
            self._check_stop(i, pool, now)
        self._check_burst(now)
        # Finished requests change the replicas' samples slowly: compare them once a second.
        if (self._samples is not None and len(self._samples) >= 2
                and now - self._depart_checked_ns >= _DEPART_EVERY_NS):
            self._depart_checked_ns = now
            self._check_departure(now)

    def _fire(self, trig: Trigger) -> None:
        self.triggers.append(trig)
        self._on_trigger(trig)

    def _check_stop(self, i: int, pool: LivePool, now: int) -> None:
        live = list(pool.live)
        streaming = [ex for ex in live if ex.body_bytes > 0]
        seen = self._waiting[i]
        waiting = {ex: seen.get(ex, now) for ex in live if ex.body_bytes == 0}
        self._waiting[i] = waiting
        progress = max([pool.last_read_ns, self._start_ns, *(ex.last_ns for ex in streaming)])
        if self._stopped[i] is not None:
            if progress == self._stopped[i]:
                return  # the same stop: nothing received since it fired (timeouts are no byte)
            self._stopped[i] = None
        silent_ns = now - progress
        stall_ns = self.settings.stall_s * 1e9
        detail: dict[str, Any] = {}
        if streaming:
            stopped = silent_ns >= stall_ns
        else:
            stopped = False
            firsts = self._yardstick(i)
            if waiting and len(firsts) >= MIN_ANSWERS:
                longest_ns = now - min(waiting.values())
                first_max = max(firsts)
                limit_ns = max(stall_ns, WAIT_FACTOR * first_max * 1e6)
                stopped = silent_ns >= stall_ns and longest_ns >= limit_ns
                detail = {"longest_wait_s": round(longest_ns / 1e9, 3),
                          "first_chunk_max_ms": round(first_max, 3),
                          "wait_threshold_s": round(limit_ns / 1e9, 3)}
        if stopped:
            self._stopped[i] = progress
            self._fire(Trigger("engine_stopped", now, self._names[i], {
                "open_streams": len(streaming), "waiting_for_first_byte": len(waiting),
                "silent_s": round(silent_ns / 1e9, 3), "last_byte_ns": progress,
                "threshold_s": self.settings.stall_s, **detail}))

    def _yardstick(self, i: int) -> list[float]:
        """The times to a first chunk a wait on pool `i` is judged against: its replica's own
        once it has enough (a slow peer's long queue must not hide this one's stop), else the
        run's."""
        name = self._names[i]
        own = self._replica_first_ms.get(name) if self._replica_first_ms and name else None
        return list(own) if own is not None and len(own) >= MIN_ANSWERS else list(self._first_ms)

    def _check_burst(self, now: int) -> None:
        done, errors, by_class = self._counters()
        self._history.append((now, done, errors, dict(by_class)))
        window_ns = int(self.settings.burst_window_s * 1e9)
        while len(self._history) > 1 and self._history[1][0] <= now - window_ns:
            self._history.popleft()
        t0, done0, err0, cls0 = self._history[0]
        d_err = errors - err0
        # Successes counted from the first of these errors on (the look before it): a window
        # that also holds the healthy minutes before an incident must not dilute it.
        before = next((h for h, nxt in zip(self._history, list(self._history)[1:], strict=False)
                       if nxt[2] > err0), self._history[0])
        d_done = done - before[1]
        burst = d_err >= self.settings.burst_errors and d_err >= d_done  # errors >= half of those ended
        if burst and not self._bursting:
            grown = {k: v - cls0.get(k, 0) for k, v in by_class.items() if v > cls0.get(k, 0)}
            top = max(grown, key=lambda k: grown[k]) if grown else "unknown"
            self._fire(Trigger("error_burst", now, None, {
                "errors": d_err, "ended": d_err + d_done, "window_s": self.settings.burst_window_s,
                "top_class": top, "by_class": grown}))
        self._bursting = burst

    def _check_departure(self, now: int) -> None:
        assert self._samples is not None
        itls, concs = {}, {}
        for name, recent in self._samples.items():
            if len(recent) >= self.settings.depart_min_samples:
                itls[name] = np.fromiter((x[0] for x in recent), float)
                concs[name] = float(np.mean([x[1] for x in recent]))
        if len(itls) < 2:
            return
        for name, own in itls.items():
            others = np.concatenate([v for k, v in itls.items() if k != name])
            itl = float(np.median(own))
            p_itl = float(np.median([np.median(v) for k, v in itls.items() if k != name]))
            conc = concs[name]
            p_conc = float(np.mean([v for k, v in concs.items() if k != name]))
            equal_load = p_conc > 0 and 0.5 <= conc / p_conc <= 2.0
            # Apart, not only a median ahead: its lower quartile above the peers' upper one.
            apart = float(np.quantile(own, 0.25)) > float(np.quantile(others, 0.75))
            departs = (equal_load and apart and p_itl > 0
                       and itl >= self.settings.depart_ratio * p_itl)
            if departs and name not in self._departed:
                self._departed.add(name)
                self._fire(Trigger("replica_departs", now, name, {
                    "itl_p50_ms": round(itl, 3), "peers_itl_p50_ms": round(p_itl, 3),
                    "concurrency": round(conc, 2), "peers_concurrency": round(p_conc, 2),
                    "ratio": round(itl / p_itl, 3), "threshold_ratio": self.settings.depart_ratio}))
            elif not departs and itl < self.settings.depart_ratio * p_itl:
                self._departed.discard(name)


@dataclass
class Watch:
    """What `infbench run` hands the runner: the thresholds and what to do on a trigger."""

    settings: WatchSettings
    on_trigger: Callable[[Trigger], None]


def start_watcher(watch: Watch, pools: Sequence[LivePool], names: Sequence[str | None],
                  stats: Any, fleet: bool) -> Watcher:
    """A watcher over the run's pools and live stats (`run.types.LiveStats`)."""
    return Watcher(watch.settings, pools, names,
                   lambda: (stats.done, stats.errors, stats.errors_by_class),
                   stats.replica_recent if fleet else None, watch.on_trigger,
                   stats.recent_first_chunk_ms, stats.replica_first_chunk_ms if fleet else None)
