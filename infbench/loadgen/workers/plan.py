"""How a run's load is split across workers: which sessions each sends, at what intended times,
with how many slots.

The coordinator and every worker apply the same rule to the same seeded session stream, so the
schedule is the single-process one, partitioned, without shipping it: session k (in the order
the workload yields them) belongs to `owner(k)`; its intended send time is the open loop's
k-th arrival offset (or the trace's), on the run's shared t0. The unit is the session, so a
conversation's turns all stay on one worker (its history lives there). Shares follow the
slots: a closed loop of C slots over N workers gives each C // N (the first C % N one more)
and sessions go to workers in proportion, in a weighted round robin that keeps every prefix
within one session of each worker's share (4 and 3 slots: 0 1 0 1 0 1 0, not 0 0 0 0 1 1 1),
so no worker's share is bunched in time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.run.types import RunSettings
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads.base import RequestSpec, Session, Workload


def split(total: int, parts: int) -> list[int]:
    """`total` as `parts` integers differing by at most one, the larger first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _cycle(weights: list[int]) -> list[int]:
    """One period of a weighted round robin over `weights` (each > 0) in which, at every
    prefix n, each worker has owned within one session of its exact share n * w / total.

    Tijdeman's chairman-assignment schedule: with k workers and d = 1 / (2k - 2), a worker's
    j-th session may come once its share has reached j - 1 + d and must come before it
    exceeds j - d; earliest deadline first among the sessions that may come meets every
    deadline, so no prefix is off by more than 1 - d. (nginx's smooth weighted round robin,
    used before, is off by more: 1.06 sessions for weights 1, 1, 1, 5, 5, 5.)"""
    g = math.gcd(*weights)
    w = [x // g for x in weights]
    total, k = sum(w), len(w)
    if k == 1:
        return [0]
    d = Fraction(1, 2 * k - 2)
    placed = [0] * k
    out = []
    for n in range(1, total + 1):
        due: list[tuple[bool, int, int]] = []
        for i, x in enumerate(w):
            j = placed[i] + 1
            if j <= x:
                released = n * x >= (j - 1 + d) * total
                # the last step at which the j-th may still come
                due.append((not released, math.floor((j - d) * total / x) + 1, i))
        _, _, best = min(due)  # released first; the theorem says one always is
        placed[best] += 1
        out.append(best)
    return out


@dataclass(frozen=True)
class Plan:
    """The partition of one run. Owns nothing mutable; `check_invariants()` states its rules."""

    workers: int
    concurrency: tuple[int, ...]  # per worker: slots (closed loop) or in-flight cap (0: none)
    cycle: tuple[int, ...]  # session k belongs to cycle[k % len(cycle)]
    turns: int  # requests a session can have (the runner commits a session's turns at once)
    session_limit: int | None  # sessions the run starts when it stops by count; else None

    def owner(self, k: int) -> int:
        return self.cycle[k % len(self.cycle)]

    def sessions_of(self, worker: int, n: int) -> int:
        """How many of the first `n` sessions belong to `worker`."""
        full, rest = divmod(n, len(self.cycle))
        return full * self.cycle.count(worker) + self.cycle[:rest].count(worker)

    def share(self, worker: int) -> float:
        return self.cycle.count(worker) / len(self.cycle)

    def check_invariants(self) -> None:
        assert self.workers >= 1 and len(self.concurrency) == self.workers
        assert set(self.cycle) == set(range(self.workers)), "every worker owns sessions"
        if self.session_limit is not None:
            assert sum(self.sessions_of(w, self.session_limit) for w in range(self.workers)) == self.session_limit


def make_plan(settings: RunSettings, workload: Workload, workers: int) -> Plan:
    """The partition, or ValueError (a usage error) when the load cannot be split that way."""
    if workers < 1:
        raise ValueError(f"workers: must be >= 1, not {workers}")
    a = settings.arrivals
    turns = max(1, int(getattr(workload, "turns", 1)))
    if a.kind == "closed" or a.concurrency > 0:
        if a.concurrency < workers:
            what = "slots" if a.kind == "closed" else "an in-flight cap"
            raise ValueError(f"workers: --concurrency {a.concurrency} ({what}) cannot be split across "
                             f"{workers} workers; give at least one per worker")
        conc = split(a.concurrency, workers)
        cycle = _cycle(conc)
    else:
        conc = [0] * workers
        cycle = list(range(workers))
    limit = None
    if settings.num_requests is not None:
        limit = -(-settings.num_requests // turns)  # a session commits all its turns
        if limit < workers:
            raise ValueError(f"workers: --num-requests {settings.num_requests} is fewer sessions "
                             f"({limit}) than workers ({workers})")
    plan = Plan(workers, tuple(conc), tuple(cycle), turns, limit)
    plan.check_invariants()
    return plan


def worker_settings(settings: RunSettings, plan: Plan, worker: int) -> RunSettings:
    """The settings worker `worker` runs its share with: its slots or cap, its count, and (open
    loop) the schedule's intended times carried on each session's first request, as a trace."""
    a = settings.arrivals
    if a.kind == "closed":
        arrivals = dataclasses.replace(a, concurrency=plan.concurrency[worker])
    else:
        arrivals = Arrivals("trace", concurrency=plan.concurrency[worker], time_scale=1.0)
    num = None if plan.session_limit is None else plan.sessions_of(worker, plan.session_limit) * plan.turns
    scrapes = worker == 0  # one worker scrapes the target's /metrics and step log, not N
    return dataclasses.replace(
        settings, arrivals=arrivals, num_requests=num, metrics_bind=None,
        metrics_url=settings.metrics_url if scrapes else None,
        steps_url=settings.steps_url if scrapes else None)


def planned_requests(settings: RunSettings, plan: Plan, workload: Workload) -> list[int | None]:
    """Requests each worker is to send, where the stop condition fixes it (by count; an open
    loop of a known rate up to --duration); None where it does not (a closed loop for a time)."""
    a = settings.arrivals
    n = plan.session_limit
    if a.kind not in ("closed", "trace") and settings.duration_s is not None:
        offsets = a.offsets(Streams(settings.seed, settings.prompt_salt).arrivals())
        by_time = 0
        while next(offsets) < settings.duration_s and (n is None or by_time < n):
            by_time += 1
        n = by_time if n is None else min(n, by_time)
    if n is None:
        return [None] * plan.workers
    return [plan.sessions_of(w, n) * plan.turns for w in range(plan.workers)]


def global_index(k: int, turn: int | None, turns: int) -> int:
    """The stored request_idx of turn `turn` of session k: k for one-turn sessions (the index a
    single process gives them), k * turns + turn for conversations (one process numbers their
    turns in the order replies come back, which no partition can reproduce)."""
    return k if turns == 1 else k * turns + (turn or 0)


def _tagged(sess: Session, k: int, tags: dict[int, int], first: RequestSpec | None) -> Session:
    """Session `sess` as the runner sees it, each request tagged with its session index."""
    try:
        spec = first if first is not None else next(sess)
    except StopIteration:
        return
    try:
        while True:
            tags[id(spec)] = k
            reply = yield spec
            try:
                spec = sess.send(reply)
            except StopIteration:
                return
    finally:
        sess.close()


def owned_sessions(workload: Workload, streams: Streams, arrivals: Arrivals, plan: Plan, worker: int,
                   tags: dict[int, int]) -> Iterator[Session]:
    """Worker `worker`'s sessions, in schedule order. `arrivals` is the run's (not the worker's):
    an open loop's offsets are drawn for every session, so session k's time is the same in
    every worker and in a single process. Each owned open-loop session's first request carries
    its intended offset in `at`."""
    offsets = (arrivals.offsets(streams.arrivals())
               if arrivals.kind not in ("closed", "trace") else None)
    k = 0
    for sess in workload.sessions(streams):
        if plan.session_limit is not None and k >= plan.session_limit:
            return
        if arrivals.kind == "closed":
            if plan.owner(k) == worker:
                yield _tagged(sess, k, tags, None)
            k += 1
            continue
        spec = next(sess, None)  # as the single-process open loop: an empty session takes no time
        if spec is None:
            continue
        at = next(offsets) if offsets is not None else (spec.at or 0.0)
        if plan.owner(k) == worker:
            spec.at = at
            yield _tagged(sess, k, tags, spec)
        k += 1


def index_hook(tags: dict[int, int], turns: int) -> Callable[[RequestSpec], int]:
    def index(spec: RequestSpec) -> int:
        return global_index(tags.pop(id(spec)), spec.turn, turns)
    return index
