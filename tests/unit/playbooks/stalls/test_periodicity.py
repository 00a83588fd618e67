"""Period fitting (playbooks/periodicity.py): the fundamental, not a divisor or a multiple.

Property tests generate event trains the way stall sources make them: a period in seconds
(0.2-60 s) or in engine steps (10-5,000, integer), jitter, a share of the periods with no
event (nobody was streaming), and unrelated events mixed in. Examples are derandomized, so
a run of the suite sees the same trains every time.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from playbooks.stalls.periodicity import fit_on_grid, fit_period


def train(seed: int, period: float, steps: bool, kept: int, jitter: float, missing: float,
          extra: float) -> np.ndarray:
    """`kept` events on the grid out of kept / (1 - missing) periods, Gaussian jitter of
    `jitter` periods, and unrelated uniform events making up `extra` of the result; in
    shuffled order (the fit must not rely on the order it is given)."""
    rng = np.random.default_rng(seed)
    total = int(round(kept / (1 - missing)))
    k = np.sort(rng.choice(total, kept, replace=False))
    offset = float(rng.integers(0, 1000 * period)) if steps else float(rng.uniform(0, 1000 * period))
    t = offset + k * period + rng.normal(0.0, jitter * period, kept)
    n_extra = int(round(extra * kept / (1 - extra)))
    t = np.concatenate([t, rng.uniform(t.min(), t.max(), n_extra)])
    if steps:
        t = np.round(t)  # a step id is an integer
    return rng.permutation(t)


periods = st.one_of(
    st.tuples(st.floats(np.log(0.2), np.log(60.0)).map(np.exp), st.just(False)),
    st.tuples(st.integers(10, 5000).map(float), st.just(True)),
)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(period_clock=periods, kept=st.integers(24, 150), jitter=st.floats(0.0, 0.02),
       missing=st.floats(0.0, 0.4), extra=st.floats(0.0, 0.25), seed=st.integers(0, 2**32 - 1))
def test_fundamental_recovered_within_5_percent(period_clock: tuple[float, bool], kept: int,
                                                jitter: float, missing: float, extra: float,
                                                seed: int) -> None:
    period, steps = period_clock
    fit = fit_period(train(seed, period, steps, kept, jitter, missing, extra), 1.0 if steps else 0.0)
    assert fit is not None and fit.significant, fit
    assert abs(fit.period / period - 1) <= 0.05, (fit.period, period)
    # Most of the events that were put on the grid are found on it.
    assert fit.hits >= 0.8 * kept


@pytest.mark.parametrize(("period", "steps", "missing"), [
    (5040.0, True, 0.3),    # divisible by 2..10, 12, 14, 15, 16, 18, 20, 21, ...
    (720.0, True, 0.5),
    (60.0, False, 0.2),     # 60 s: 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 all divide it
    (360.0, True, 0.0),
])
def test_period_with_many_divisors_is_not_cut_down(period: float, steps: bool, missing: float) -> None:
    t = train(7, period, steps, 30, 0.0, missing, 0.0)  # no jitter: every divisor aligns too
    fit = fit_period(t, 1.0 if steps else 0.0)
    assert fit is not None and fit.significant
    assert fit.period == pytest.approx(period, rel=0.005)
    # Each divisor P/k explains the same events but predicts k - 1 events per period that
    # never happen; the fit keeps P and counts only the periods that really had none.
    assert fit.hits == 30
    assert fit.missed == round((t.max() - t.min()) / period) + 1 - 30


@pytest.mark.parametrize(("missing", "seed"), [(0.55, 1), (0.65, 2), (0.75, 3)])
def test_high_missing_share_does_not_make_half_the_period_win(missing: float, seed: int) -> None:
    # Most observed intervals are 2P, 3P or more: the median interval is a multiple of the
    # period, and P/2 aligns every interval that P aligns.
    t = train(seed, 3.0, False, 28, 0.01, missing, 0.0)
    assert np.median(np.diff(np.sort(t))) >= 1.9 * 3.0
    fit = fit_period(t)
    assert fit is not None and fit.significant
    assert fit.period == pytest.approx(3.0, rel=0.02)
    assert fit.hits == 28
    assert fit.missed == round((t.max() - t.min()) / 3.0) + 1 - 28


@settings(max_examples=150, deadline=None, derandomize=True)
@given(n=st.integers(4, 300), mean=st.floats(0.05, 100.0), integer=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_random_times_are_not_periodic(n: int, mean: float, integer: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(mean * (40 if integer else 1), n))
    if integer:
        t = np.round(t)
    fit = fit_period(t, 1.0 if integer else 0.0)
    assert fit is None or (not fit.significant and fit.strength == 0.0), fit


def test_divisor_and_multiple_score_lower_than_the_fundamental() -> None:
    # The model's arithmetic, checked directly: the same 40 events, fitted at P, P/2, P/3
    # and 2P (each refitted from that start) - the likelihood ratio peaks at P.
    t = train(11, 2.5, False, 40, 0.005, 0.3, 0.0)
    fit = fit_period(t)
    assert fit is not None and fit.period == pytest.approx(2.5, rel=0.01)
    for wrong in (2.5 / 2, 2.5 / 3, 5.0):
        grid = np.round((t - fit.phase) / wrong).astype(np.int64)
        other = fit_on_grid(t, grid - grid.min())
        assert other is not None and other.llr < fit.llr - 5, (wrong, other.llr, fit.llr)


def test_steps_and_seconds_periods_count_the_same_periods() -> None:
    # A timer every 2.5 s while steps take 6.6 ms: 30% of the periods show no stall. The
    # steps period fitted on the seconds grid is the seconds period in steps.
    rng = np.random.default_rng(4)
    k = np.sort(rng.choice(40, 28, replace=False))
    seconds = 2.5 * k + rng.normal(0, 0.002, len(k))
    steps = np.round(seconds / 0.0066)
    fit = fit_period(seconds)
    assert fit is not None and fit.significant and fit.period == pytest.approx(2.5, rel=0.005)
    in_steps = fit_on_grid(steps, fit.grid, quantum=1.0)
    assert in_steps is not None
    assert in_steps.period == pytest.approx(2.5 / 0.0066, rel=0.005)
    assert (in_steps.hits, in_steps.missed) == (fit.hits, fit.missed) == (28, k[-1] - k[0] + 1 - 28)


def test_too_few_events_or_no_spread_give_no_fit() -> None:
    assert fit_period(np.array([1.0, 2.0, 3.0])) is None
    assert fit_period(np.array([5.0, 5.0, 5.0, 5.0])) is None
    assert fit_period(np.array([0.0, 1.0, np.nan, 2.0])) is None  # 3 finite events


@pytest.mark.parametrize(("period", "kept", "locked", "seed"),
                         [(0.7, 9, 1, 1), (0.7, 9, 2, 2), (0.45, 12, 2, 3), (1.3, 10, 1, 4),
                          (2.2, 14, 2, 5), (0.6, 11, 2, 6)])
def test_pauses_phase_locked_at_half_periods_do_not_halve_the_period(
        period: float, kept: int, locked: int, seed: int) -> None:
    """A closed loop whose requests last about a period phase-locks other pauses (their
    prefills) to the timer: CI saw a 0.7 s timer reported as 0.35 s from 9 timer pauses and
    2 at half periods. The divisor explains 2 more events; the half of its grid points that
    stay empty say it is not the period."""
    rng = np.random.default_rng(seed)
    k = np.sort(rng.choice(kept + 1, kept, replace=False))
    t = k * period + rng.uniform(0, 0.006, kept)
    half = rng.choice(kept, locked, replace=False) * period + period / 2 + rng.uniform(0, 0.006, locked)
    fit = fit_period(np.concatenate([t, half]))
    assert fit is not None and fit.significant
    assert fit.period == pytest.approx(period, rel=0.01)
    assert fit.hits == kept and fit.extra == locked


@settings(max_examples=150, deadline=None, derandomize=True)
@given(period_clock=periods, kept=st.integers(12, 20), jitter=st.floats(0.0, 0.003),
       missing=st.floats(0.0, 0.2), extra=st.floats(0.5, 0.75), seed=st.integers(0, 2**32 - 1))
def test_unrelated_events_outnumbering_the_period_do_not_move_it(
        period_clock: tuple[float, bool], kept: int, jitter: float, missing: float, extra: float,
        seed: int) -> None:
    """A timer's few pauses among more of a busy host's own (a real vLLM beside a CPU-bound
    neighbour: 10-14 pauses of the timer among 39). When the search cannot show the period it
    says so; when it does, it is the period, never a divisor."""
    period, steps = period_clock
    fit = fit_period(train(seed, period, steps, kept, jitter, missing, extra), 1.0 if steps else 0.0)
    if fit is not None and fit.significant:
        assert fit.period == pytest.approx(period, rel=0.02), (fit.period, period)
        assert fit.hits >= 0.8 * kept


@pytest.mark.parametrize(("period", "unrelated", "seed"), [(2.35, 25, 28), (1.3, 30, 44), (3.7, 28, 25)])
def test_unrelated_events_do_not_pull_the_period_off_its_grid(
        period: float, unrelated: int, seed: int) -> None:
    """14 pauses a few ms off a 2.35 s timer and 25 unrelated ones: the unrelated events' mean
    phase vector pointed against the timer's, and a search on the mean vector placed the
    period at 2.407 s (2.4% off: over 14 periods the grid misses every pause), so 2.35/3 won
    (the failure a real vLLM's CI run showed). Counting the events inside a narrow phase
    window finds the timer."""
    rng = np.random.default_rng(seed)
    on = np.arange(1, 15) * period + rng.normal(0, 0.005, 14)
    t = np.concatenate([on, rng.uniform(0, 15 * period, unrelated)])
    fit = fit_period(t)
    assert fit is not None and fit.significant
    assert fit.period == pytest.approx(period, rel=0.005)
    assert fit.hits >= 14


# A real train: `diagnose stalls` on a real vLLM (CPU build) whose engine core was SIGSTOPped
# 0.12 s every 1.3 s (15 pauses) beside a CPU-bound neighbour, no step log, so each event is
# the start of the clients' gap: the last token before the pause, up to one step earlier,
# and the pausing thread itself ran up to 15 ms late. Seconds from the first event.
REAL_VLLM_1_3S = [0.0, 1.3106, 2.0381, 2.3749, 2.6039, 3.9164, 4.0417, 5.2066, 6.2782, 6.4856,
                  7.8104, 8.4124, 8.5712, 9.0733, 9.2425, 10.414, 11.7135, 13.0003, 14.3158,
                  14.3161, 15.6168]
REAL_VLLM_GAP_RESOLUTION_S = 0.0077  # `resolution` of that run's ordinary inter-token gaps


def test_client_timed_events_keep_the_pauses_a_step_off_the_grid() -> None:
    """With one spread, the fit kept the 8 pauses that fell within 2 ms of a grid and called
    the 5 that came 8-37 ms off it unrelated (round R23: 8 of 15 on the period; the real
    test asks 9); a floor of the observation's resolution under that one spread fixed this
    train but lost significance on another (round R24). The core and the displaced share,
    fitted apart, keep all 13 grid points that had a pause."""
    t = np.array(REAL_VLLM_1_3S)
    exact = fit_period(t)
    assert exact is not None and exact.hits == 8  # the failure, with times taken as exact
    fit = fit_period(t, observed=REAL_VLLM_GAP_RESOLUTION_S)
    assert fit is not None and fit.significant and fit.llr >= exact.llr
    assert fit.period == pytest.approx(1.3, rel=0.005)
    assert fit.hits >= 13 and fit.missed == 0


@settings(max_examples=80, deadline=None, derandomize=True)
@given(period=st.floats(np.log(0.5), np.log(6.0)).map(np.exp), kept=st.integers(12, 24),
       step=st.floats(0.004, 0.03), core=st.floats(0.3, 0.7), extra=st.floats(0.3, 1.0),
       seed=st.integers(0, 2**32 - 1))
def test_a_tight_core_does_not_push_the_displaced_pauses_off_the_period(
        period: float, kept: int, step: float, core: float, extra: float, seed: int) -> None:
    """Some pauses land within a millisecond of the grid, the rest anywhere in the step before
    it (read at the last token) and up to 15 ms late (a timer thread beside a busy
    neighbour); unrelated pauses besides. Given the observation's scale, the fit shows the
    period and keeps 80% of the timer's pauses."""
    rng = np.random.default_rng(seed)
    moved = rng.random(kept) >= core
    off = np.where(moved, rng.uniform(-step, 0.0, kept) + rng.uniform(0.0, 0.015, kept),
                   rng.uniform(-0.001, 0.001, kept))
    t = rng.permutation(np.concatenate([np.arange(kept) * period + off,
                                        rng.uniform(0, kept * period, int(kept * extra))]))
    fit = fit_period(t, observed=step / np.sqrt(12))
    assert fit is not None and fit.significant
    assert fit.period == pytest.approx(period, rel=0.005)
    assert fit.hits >= 0.8 * kept, (fit.hits, kept)


# The likeliest random train the calibration has met (benchmarks/results/diagnose_stalls.md):
# ten Poisson times, six of them within 1.3 ms of a 1.57 s grid by chance.
LUCKIEST_POISSON_TRAIN = [0.0670749, 1.60043752, 1.63436463, 3.20191022, 6.12439352,
                          6.34159372, 7.62847705, 7.91192064, 8.56550314, 9.48277021]


@pytest.mark.parametrize("observed", [0.0, 0.003, 0.01, 0.03])
def test_the_luckiest_random_train_met_is_not_significant(observed: float) -> None:
    """27.0 nats with exact times, 27.5 with a displaced share: below the threshold, which
    must not move under it (nor the model grow looser around it)."""
    fit = fit_period(np.array(LUCKIEST_POISSON_TRAIN), observed=observed)
    assert fit is not None and 26.0 < fit.llr < 28.0 and not fit.significant
