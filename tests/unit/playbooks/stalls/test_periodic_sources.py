"""Which clock a periodic stall keeps time with (playbooks/stalls/periodic_sources.py).

Event trains are made the way the engine makes them: steps of given durations (and tokens
per step) one after another, a timer that fires at the first step starting after it is
due, a counter that fires every N steps; the event is stamped at its step's start in
seconds, its step id, and the tokens produced before it.
"""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.stalls.findings import RANK_TIE
from playbooks.stalls.periodic_sources import Periodicity, Source, _score, common_grid, resolution


def _engine(rng: np.random.Generator, n_steps: int, prefill_every: float, batch: tuple[int, int],
            decode_ms: float = 7.0, prefill_ms: tuple[float, float] = (15.0, 40.0)
            ) -> tuple[np.ndarray, np.ndarray]:
    """Step durations (s) and tokens per step: decode steps of `decode_ms` (+-1%), a prefill
    step with probability 1/prefill_every (0: never), a batch drawn from `batch`."""
    dur = decode_ms * (1 + 0.01 * rng.standard_normal(n_steps))
    if prefill_every:
        pre = rng.random(n_steps) < 1 / prefill_every
        dur[pre] = rng.uniform(*prefill_ms, pre.sum())
    tokens = rng.integers(batch[0], batch[1] + 1, n_steps).astype(float)
    return dur / 1e3, tokens


def _events(dur: np.ndarray, tokens: np.ndarray, every_s: float | None, every_steps: int | None,
            stall_s: float) -> dict[str, np.ndarray]:
    start = np.concatenate([[0.0], np.cumsum(dur)[:-1]])
    ids: list[int] = []
    if every_steps:
        ids = list(range(every_steps, len(dur), every_steps))
    else:
        assert every_s
        due, shift = every_s, 0.0
        for i in range(len(dur)):
            if start[i] + shift >= due:
                ids.append(i)
                shift += stall_s
                due += every_s
                while due <= start[i] + shift:
                    due += every_s
    idx = np.asarray(ids)
    # a stall lengthens its step: every later step starts that much later
    shift_at = np.searchsorted(idx, np.arange(len(dur)), side="left") * stall_s
    before = np.concatenate([[0.0], np.cumsum(tokens)[:-1]])
    return {"seconds": start[idx] + shift_at[idx], "steps": idx.astype(float),
            "output tokens": before[idx]}


def _ranked(dur: np.ndarray, tokens: np.ndarray, ev: dict[str, np.ndarray]) -> dict[str, float]:
    floors = {"seconds": resolution(dur), "steps": resolution(np.ones(1)),
              "output tokens": resolution(tokens)}
    clocks = {"seconds": (ev["seconds"], 0.0), "steps": (ev["steps"], 1.0),
              "output tokens": (ev["output tokens"], 1.0)}
    _, fits = common_grid(clocks, floors)
    return {name: _score(fits[name], floors[name]) for name in clocks}


@pytest.mark.parametrize("q", [0.004, 0.0071, 1.0, 5.0])
def test_resolution_of_equal_quanta_is_uniform_rounding(q: float) -> None:
    assert resolution(np.full(50, q)) == pytest.approx(q / np.sqrt(12), rel=1e-9)


@pytest.mark.parametrize(("short", "long", "share", "seed"),
                         [(0.007, 0.027, 0.1, 1), (0.005, 0.06, 0.03, 2), (2.0, 9.0, 0.4, 3)])
def test_resolution_matches_due_times_dropped_at_random(short: float, long: float, share: float,
                                                        seed: int) -> None:
    rng = np.random.default_rng(seed)
    q = np.where(rng.random(20000) < share, long, short)
    ends = np.cumsum(q)
    due = rng.uniform(0, ends[-1] - long, 200000)
    delay = ends[np.searchsorted(ends, due, side="right")] - due
    assert resolution(q) == pytest.approx(float(np.std(delay)), rel=0.03)
    assert resolution(np.array([])) == 0.0


CASES = [  # (seed, steps, prefill every, batch, every_s, every_steps, stall_s)
    (11, 2500, 8, (2, 9), 0.45, None, 0.095),
    (12, 3000, 14, (1, 6), 0.8, None, 0.13),
    (13, 2600, 6, (3, 10), None, 41, 0.11),
    (14, 4000, 10, (1, 8), None, 73, 0.07),
]


@pytest.mark.parametrize(("seed", "n", "pre", "batch", "every_s", "every_steps", "stall"), CASES)
def test_own_clock_wins_when_step_time_and_batch_vary(seed: int, n: int, pre: int,
                                                      batch: tuple[int, int], every_s: float | None,
                                                      every_steps: int | None, stall: float) -> None:
    rng = np.random.default_rng(seed)
    dur, tokens = _engine(rng, n, pre, batch)
    scores = _ranked(dur, tokens, _events(dur, tokens, every_s, every_steps, stall))
    own = "seconds" if every_s else "steps"
    assert scores[own] >= 0.9, scores
    assert all(v < RANK_TIE * scores[own] for k, v in scores.items() if k != own), scores


@pytest.mark.parametrize(("seed", "every_s", "every_steps", "decode_ms", "b"),
                         [(21, 0.6, None, 6.9, 4), (22, 1.3, None, 11.0, 7),
                          (23, None, 48, 6.9, 5), (24, None, 95, 9.5, 3)])
def test_steady_step_time_and_batch_tie_instead_of_a_guess(seed: int, every_s: float | None,
                                                            every_steps: int | None, decode_ms: float,
                                                            b: int) -> None:
    """Every step the same length and batch: a timer, a step counter and a token counter
    are one clock; neither may be crowned on noise within the step quantum."""
    rng = np.random.default_rng(seed)
    dur, tokens = _engine(rng, 2000, 0, (b, b), decode_ms=decode_ms)
    scores = _ranked(dur, tokens, _events(dur, tokens, every_s, every_steps, 0.1))
    best = max(scores.values())
    assert best >= 0.9 and min(scores.values()) >= RANK_TIE * best, scores


def test_jitter_beyond_the_resolution_still_costs() -> None:
    from playbooks.stalls.periodicity import fit_period
    rng = np.random.default_rng(5)
    k = np.arange(20)
    tight = fit_period(1.0 * k + rng.normal(0, 0.002, 20))
    loose = fit_period(1.0 * k + rng.normal(0, 0.03, 20))
    assert tight is not None and loose is not None
    floor = 0.007 / np.sqrt(12)  # 7 ms steps
    assert _score(tight, floor) == pytest.approx(tight.strength)
    assert _score(loose, floor) < 0.5 * _score(tight, floor)


def _tied(dur: np.ndarray, tokens: np.ndarray, ev: dict[str, np.ndarray]) -> tuple[str, set[str]]:
    """(leader, clocks tied with it) as the playbook ranks them."""
    floors = {"seconds": resolution(dur), "steps": resolution(np.ones(1)),
              "output tokens": resolution(tokens)}
    clocks = {"seconds": (ev["seconds"], 0.0), "steps": (ev["steps"], 1.0),
              "output tokens": (ev["output tokens"], 1.0)}
    grid, fits = common_grid(clocks, floors)
    sources = sorted((Source(n, n, _score(fits[n], floors[n]), fits[n], "",
                             _score(fits[n], floors[n], optimistic=True)) for n in clocks),
                     key=lambda s: -s.score)
    per = Periodicity(fits["seconds"], fits["steps"], fits["output tokens"], grid, sources, None)
    tied = per.tied()
    return tied[0].clock, {s.clock for s in tied}


# Seeds where the old tie rule (plain scores within RANK_TIE) crowned steps alone over the
# timer's seconds: 53, 1423, 1437, 1438, 1440 (15 of 600 seeds of this generator); the rest
# vary the parameters.
@pytest.mark.parametrize("seed", [53, 1423, 1437, 1438, 1440, 7, 8, 9, 10, 11])
def test_few_periods_on_a_busy_host_never_crown_the_wrong_clock(seed: int) -> None:
    """A steady decode (one batch, 5-7 ms steps) whose device keeps its clock while the
    host wakes late for some steps (a busy neighbour: the late step is long, the next one
    catches up), and a timer firing 8-10 times. Steps sit on their lattice; the timer's
    seconds carry the host's lateness besides, a ms or so of spread that 8-10 events cannot
    measure. The timer's clock is first or tied, never beaten alone (CI ranked steps 1.00
    over seconds 0.92, crowned, on such a run)."""
    rng = np.random.default_rng(seed)
    decode_ms, every_s = rng.uniform(5.0, 7.0), rng.uniform(0.5, 0.8)
    n = int(every_s * rng.uniform(8.5, 10.5) / (decode_ms * 1e-3))
    late = np.where(rng.random(n + 1) < rng.uniform(0.1, 0.5),
                    np.minimum(rng.exponential(rng.uniform(1e-3, 4e-3), n + 1), 0.02), 0.0)
    dur = np.diff(np.arange(n + 1) * decode_ms * 1e-3 + late)
    tokens = np.full(n, 4.0)
    lead, tied = _tied(dur, tokens, _events(dur, tokens, every_s, None, 0.085))
    assert "seconds" in tied, (lead, tied)


@pytest.mark.parametrize(("seed", "n", "pre", "batch", "every_s", "every_steps", "stall"), CASES)
def test_own_clock_alone_when_step_time_and_batch_vary(seed: int, n: int, pre: int,
                                                       batch: tuple[int, int], every_s: float | None,
                                                       every_steps: int | None, stall: float) -> None:
    """Where the clocks drift apart the sampling error does not blur them: nothing ties."""
    rng = np.random.default_rng(seed)
    dur, tokens = _engine(rng, n, pre, batch)
    lead, tied = _tied(dur, tokens, _events(dur, tokens, every_s, every_steps, stall))
    assert tied == {"seconds" if every_s else "steps"}, (lead, tied)
