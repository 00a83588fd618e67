"""The partition of a run's schedule across workers: every session to exactly one worker, in
proportion to its slots, spread in time, with the single-process schedule's intended times."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.run.types import RunSettings
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workers.plan import (
    _cycle,
    global_index,
    make_plan,
    owned_sessions,
    planned_requests,
    split,
    worker_settings,
)
from infbench.loadgen.workloads import Synthetic
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.multiturn import MultiTurn
from infbench.loadgen.workloads.prompts import TokenModel


def _settings(arrivals: Arrivals, **kw: object) -> RunSettings:
    return RunSettings(url="http://127.0.0.1:1", endpoint="completions", model="m", arrivals=arrivals,
                       prompt_salt=None, **kw)  # type: ignore[arg-type]


def _synthetic() -> Synthetic:
    return Synthetic(LengthDist.parse("uniform:10:50", "in"), LengthDist.parse("uniform:2:9", "out"), TokenModel())


@given(st.lists(st.integers(1, 9), min_size=1, max_size=6))
@example([1, 1, 1, 5, 5, 5])  # smooth weighted round robin was 1.06 sessions off here
@example([7, 2, 2, 2, 2, 2])
def test_the_cycle_gives_each_worker_its_weight_and_never_bunches(weights: list[int]) -> None:
    cycle = _cycle(weights)
    total = sum(weights)
    for w, x in enumerate(weights):
        # Over any full period each worker owns its weight's share (after the gcd reduction).
        assert cycle.count(w) * total == x * len(cycle)
    # Smooth: in any prefix a worker is within one session of its exact share.
    for n in range(1, len(cycle) + 1):
        for w, x in enumerate(weights):
            assert abs(cycle[:n].count(w) - n * x / total) < 1.0 + 1e-9


def test_split_keeps_the_total() -> None:
    assert split(7, 3) == [3, 2, 2] and split(8, 2) == [4, 4] and sum(split(1000, 7)) == 1000


@pytest.mark.parametrize(("conc", "workers", "num"), [(8, 2, 40), (7, 3, 31), (100, 4, 250)])
def test_closed_loop_shares_follow_the_slots_and_cover_every_session(conc: int, workers: int, num: int) -> None:
    s = _settings(Arrivals("closed", concurrency=conc), num_requests=num,
                  steps_url="http://127.0.0.1:1/engine/steps", metrics_url="http://127.0.0.1:1/metrics")
    plan = make_plan(s, _synthetic(), workers)
    plan.check_invariants()
    assert list(plan.concurrency) == split(conc, workers)
    shares = [worker_settings(s, plan, w) for w in range(workers)]
    assert sum(x.arrivals.concurrency for x in shares) == conc
    assert sum(x.num_requests or 0 for x in shares) == num
    assert planned_requests(s, plan, _synthetic()) == [x.num_requests for x in shares]
    # Only worker 0 scrapes the target; no worker serves the live exposition.
    assert [x.steps_url for x in shares] == [s.steps_url] + [None] * (workers - 1)
    assert [x.metrics_url for x in shares] == [s.metrics_url] + [None] * (workers - 1)


def test_the_partition_replays_the_single_process_sessions() -> None:
    """The union of the workers' sessions is the workload's first N, each once, with the same
    lengths; the tags give one process's request index."""
    s = _settings(Arrivals("closed", concurrency=5), num_requests=23, seed=3)
    wl = _synthetic()
    plan = make_plan(s, wl, 3)
    alone = [next(x) for x in itertools.islice(wl.sessions(Streams(3, None)), 23)]
    seen = {}
    for w in range(3):
        tags: dict[int, int] = {}
        for sess in owned_sessions(wl, Streams(3, None), s.arrivals, plan, w, tags):
            spec = next(sess)
            k = tags[id(spec)]
            assert plan.owner(k) == w and k not in seen
            seen[k] = (spec.target_input_tokens, spec.max_tokens, spec.prompt)
    assert sorted(seen) == list(range(23))
    assert [seen[k] for k in range(23)] == [(x.target_input_tokens, x.max_tokens, x.prompt) for x in alone]


@pytest.mark.parametrize("kind", ["poisson", "gamma", "constant"])
def test_open_loop_sessions_carry_the_single_process_arrival_times(kind: str) -> None:
    arrivals = Arrivals(kind, rate=37.0, burstiness=0.5)
    s = _settings(arrivals, duration_s=3.0, seed=8)
    wl = _synthetic()
    plan = make_plan(s, wl, 4)
    offsets = list(itertools.islice(arrivals.offsets(Streams(8, None).arrivals()), 200))
    got: dict[int, float] = {}
    for w in range(4):
        tags: dict[int, int] = {}
        for sess in itertools.islice(owned_sessions(wl, Streams(8, None), arrivals, plan, w, tags), 50):
            spec = next(sess)
            got[tags[id(spec)]] = spec.at
    assert sorted(got) == list(range(200))
    assert [got[k] for k in range(200)] == offsets
    # By the time: what each worker plans adds up to the schedule's arrivals before 3 s.
    assert sum(planned_requests(s, plan, wl)) == sum(1 for t in offsets if t < 3.0)
    assert worker_settings(s, plan, 1).arrivals.kind == "trace"


def test_a_conversation_stays_on_its_worker_and_numbers_its_turns() -> None:
    wl = MultiTurn(turns=3, input_len=LengthDist.parse("20", "in"), output_len=LengthDist.parse("4", "out"),
                   tokens=TokenModel())
    s = _settings(Arrivals("closed", concurrency=4), num_requests=24)
    plan = make_plan(s, wl, 2)
    assert plan.session_limit == 8 and plan.turns == 3
    for w in range(2):
        tags: dict[int, int] = {}
        for sess in owned_sessions(wl, Streams(0, None), s.arrivals, plan, w, tags):
            spec = next(sess)
            k = tags.pop(id(spec))
            while True:
                assert plan.owner(spec.conversation_id) == w and spec.conversation_id == k
                assert global_index(k, spec.turn, 3) == 3 * k + spec.turn
                try:
                    spec = sess.send("reply text")
                except StopIteration:
                    break
                assert tags.pop(id(spec)) == k


@pytest.mark.parametrize(("arrivals", "workers", "num", "message"), [
    (Arrivals("closed", concurrency=2), 3, 10, "--concurrency 2 (slots) cannot be split across 3"),
    (Arrivals("poisson", rate=5, concurrency=1), 2, 10, "an in-flight cap"),
    (Arrivals("closed", concurrency=8), 4, 3, "fewer sessions (3) than workers (4)"),
    (Arrivals("closed", concurrency=8), 0, 3, "must be >= 1"),
])
def test_a_load_that_cannot_be_split_is_refused(arrivals: Arrivals, workers: int, num: int, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_plan(_settings(arrivals, num_requests=num), _synthetic(), workers)
