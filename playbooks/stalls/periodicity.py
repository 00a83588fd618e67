"""Is a set of event times periodic, with what period, and how tightly?

Model. Each event is either on a grid `phase + k * period` (jittered, Gaussian with an
absolute spread `s`) or unrelated, uniform over the span. Events on the grid may be missing
(a stall while no request was streaming leaves no client gap). The fit maximises the
log-likelihood ratio (LLR) of this mixture against "every event uniform" (Poisson):

    LLR = sum_i log(share * period * N(e_i; 0, s) + 1 - share)

where `e_i` is event i's offset from the nearest grid point. When the times were read with
an error (`observed`: a stall seen only from the client starts at the last token before it,
up to a step early), the on-grid density is a tight core plus a displaced share spread by 1
to 5 times that error: with one spread, the fit either kept the few pauses that fell
within a millisecond and called the rest unrelated, or widened and lost significance. `period * N(...)` is the
density on the wrapped phase circle relative to a uniform phase, so a divisor period/k of
the true period, which fits the same events with the same absolute offsets, scores log k
less for every event: the k - 1 grid points per true interval that it predicts and that
never happen cost it exactly that. So the fundamental wins over its divisors however many
of its own events are missing, and over its multiples, which leave events off the grid.

Search. Candidates are the modes of the differences between each event and its next few
(robust to missing and extra events), with their divisions by 2..5; each is placed by two
grid searches over the whole span (a 1% error drifts by a whole period over 100 periods),
on the mean phase vector and on the densest narrow phase window (the first is exact when
the periodic events dominate, the second when unrelated events outnumber them and pull the
mean vector), and EM on (share, spread, phase, period) runs from both; the likelier fit
stays. Last, the winner's multiples 2P..5P are
refitted and one replaces it when it scores higher with the grid points that stayed empty
counted too (`_fundamental`): a few pauses phase-locked at the divisor's extra points must
not outweigh the empty half of its grid.

Significance. On random (Poisson) trains of 4 to 300 events the best LLR this search finds
has a median near 11 nats (12-14 with the displaced share), a p99 near 18; over the 15,480
trains of benchmarks/bench_diagnose_stalls.py (results/diagnose_stalls.md) the highest was
27.0, one 10-event train with 6 of its events within 1.3 ms of a 1.57 s grid (the look-
elsewhere effect of searching many periods); every other size's highest was at most 23.1,
and none reached 28. `SIGNIFICANT_LLR` sits above all of them. A real period reaches it with
~8 events at 1% jitter, ~20 at 5%; the same benchmark recovers the period of 600 of 600
generated trains within 5%.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

MIN_EVENTS = 4            # fewer events on the grid cannot show a period
SIGNIFICANT_LLR = 28.0    # nats; see the module docstring for how it was set
_LAGS = 6                 # differences to the next 6 events (covers missing and extra events)
_MODES = 8                # difference modes tried as periods...
_DIVISIONS = 5            # ...each also divided by 2..5, in case the fundamental is rare
_MODE_BIN = np.log(1.02)  # modes on a log scale, 2% bins
_REFINE = 0.025           # grid search +-2.5% around a candidate (one bin either side)
_REFINE_EVENTS = 400      # events used in that search (spread evenly over the train)
_BINS = 40                # phase bins per period in the densest-window search
_EM_ITERATIONS = 12
_WIDE_MAX = 5.0           # displaced events spread at most 5x the observation's scale...
_WIDE_SHARE_MIN = 0.02    # ...and are at least 2% of the on-grid events (keeps EM off the edge)
_SQRT_2PI = float(np.sqrt(2 * np.pi))


@dataclass(frozen=True)
class PeriodFit:
    period: float        # in the unit of the input (seconds, steps, tokens)
    phase: float         # time of grid point 0 (the first event on the grid)
    share: float         # fitted share of events that keep the period
    jitter: float        # spread of on-grid events around the grid, in periods
    llr: float           # log-likelihood ratio against random times, in nats
    events: int          # events given
    hits: int            # grid points with an event (two events at one point count once)
    missed: int          # grid points between the first and last hit with no event
    extra: int           # events not counted as hits (off the grid, or a second at a point)
    grid: np.ndarray = field(repr=False, compare=False)  # grid index per event as given, -1 off grid

    @property
    def significant(self) -> bool:
        return self.llr >= SIGNIFICANT_LLR and self.hits >= MIN_EVENTS

    @property
    def strength(self) -> float:
        """0 when the period is not significant, else the share of events on it."""
        return self.share if self.significant else 0.0

    @property
    def coverage(self) -> float:
        """Share of grid points (between the first and last hit) that had an event."""
        return self.hits / (self.hits + self.missed) if self.hits else 0.0


def _resolution(t: np.ndarray, quantum: float) -> float:
    # The smallest spread a fit may claim: integer clocks (steps, tokens) are exact only to
    # a quantum; otherwise a thousandth of the typical interval. The same absolute floor
    # for every candidate, so that a divisor never gains from a tighter floor.
    d = np.diff(t)
    d = d[d > 0]
    typical = float(np.median(d)) if len(d) else 0.0
    return max(quantum / np.sqrt(12.0), 1e-3 * typical, 1e-12)


def _candidates(t: np.ndarray, floor: float) -> list[float]:
    n = len(t)
    d = np.concatenate([t[lag:] - t[:-lag] for lag in range(1, min(_LAGS, n - 1) + 1)])
    d = d[(d > 4 * floor) & (d <= (t[-1] - t[0]) / 2)]
    if not len(d):
        return []
    ld = np.log(d)
    b = np.floor((ld - ld.min()) / _MODE_BIN).astype(np.int64)
    counts = np.bincount(b).astype(float)
    smooth = counts.copy()
    smooth[1:] += counts[:-1]
    smooth[:-1] += counts[1:]
    modes: list[int] = []
    for i in np.argsort(-smooth, kind="stable"):
        if smooth[i] <= 0 or len(modes) >= _MODES:
            break
        if all(abs(int(i) - m) > 2 for m in modes):
            modes.append(int(i))
    out = []
    for m in modes:
        centre = float(np.median(d[np.abs(b - m) <= 1]))
        out += [centre / k for k in range(1, _DIVISIONS + 1) if centre / k > 4 * floor]
    out.sort()
    return [c for i, c in enumerate(out) if i == 0 or c > out[i - 1] * 1.01]


def _spread(t: np.ndarray) -> np.ndarray:
    # The events used to place a candidate (spread evenly over the train), from the first.
    sub = t if len(t) <= _REFINE_EVENTS else t[np.linspace(0, len(t) - 1, _REFINE_EVENTS).astype(int)]
    return sub - sub[0]


def _refine(t: np.ndarray, c: float) -> float:
    """The period within +-2.5% of `c` around which the events' phases concentrate most."""
    periods = (t[-1] - t[0]) / c
    if periods < 3:
        return c
    x = _spread(t)

    def best(ps: np.ndarray) -> float:
        z = np.abs(np.exp(2j * np.pi * x[None, :] / ps[:, None]).sum(axis=1))
        return float(ps[int(np.argmax(z))])

    # Coarse: the phase at the far end moves by 1/10 period per step (the concentration
    # peak is about one period wide there); then fine, 1/40 period, around the coarse best.
    coarse = c * (1 + np.linspace(-_REFINE, _REFINE, int(min(2 * periods * _REFINE * 10, 1000)) | 1))
    p = best(coarse)
    step = float(coarse[1] - coarse[0]) if len(coarse) > 1 else 0.0
    return best(np.linspace(p - step, p + step, 9))


def _densest_window(t: np.ndarray, c: float) -> tuple[float, float, float]:
    """(period, phase, share): the period within +-2.5% of `c` and the phase at which most
    events fall inside one window of 3/_BINS of a period.

    `_refine` follows the mean phase vector, which unrelated events pull too: when they
    outnumber the periodic ones (a busy host's own pauses beside a timer's), their chance
    resultant can point against the periodic events' and move the peak by a few tenths of a
    percent, enough over 15 periods to break the grid (a 2.35 s train with 25 unrelated
    events of 39 refined to 2.407 s). A count in a narrow window ignores what lies outside
    it, as the mixture does."""
    x = _spread(t)
    periods = (t[-1] - t[0]) / c
    # The phase at the far end moves by one bin per step.
    n = int(min(2 * periods * _REFINE * _BINS, 2000)) | 1
    ps = c * (1 + np.linspace(-_REFINE, _REFINE, n)) if periods >= 3 else np.array([c])
    bins = np.minimum((np.mod(x[None, :], ps[:, None]) / ps[:, None] * _BINS).astype(np.int64),
                      _BINS - 1)
    counts = np.bincount((bins + _BINS * np.arange(len(ps))[:, None]).ravel(),
                         minlength=_BINS * len(ps)).reshape(len(ps), _BINS).astype(float)
    window = counts + np.roll(counts, 1, axis=1) + np.roll(counts, -1, axis=1)
    r, b = np.unravel_index(int(np.argmax(window)), window.shape)
    p = float(ps[r])
    return p, t[0] + (b + 0.5) / _BINS * p, float(window[r, b]) / len(x)


@dataclass(frozen=True)
class _Spreads:
    floor: float      # least spread a fit may claim (`_resolution`)
    observed: float   # scale of how the times were read (0: exactly; see `fit_period`)


@dataclass
class _Mix:
    """Where a grid sits and how its events spread: a tight core (`s`) and, when the times
    were read with an observation error, a share `v` of the on-grid events displaced by it
    (`sw`, between 1x and _WIDE_MAX x the observed scale)."""
    p: float
    phase: float
    share: float
    s: float
    v: float = 0.0
    sw: float = 1.0

    def density(self, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(core, displaced, total) densities relative to a uniform phase."""
        core = self.share * (1 - self.v) * self.p * np.exp(-0.5 * (e / self.s) ** 2) / (self.s * _SQRT_2PI)
        wide = (self.share * self.v * self.p * np.exp(-0.5 * (e / self.sw) ** 2) / (self.sw * _SQRT_2PI)
                if self.v > 0 else np.zeros_like(e))
        return core, wide, core + wide + (1.0 - self.share)


def _density(e: np.ndarray, share: float, period: float, s: float) -> tuple[np.ndarray, np.ndarray]:
    core, _, dens = _Mix(period, 0.0, share, s).density(e)
    return core, dens


def _em(t: np.ndarray, c: float, m: _Mix, sp: _Spreads) -> PeriodFit:
    """EM on (share, spread, phase, period, and the displaced share and spread when the
    times were observed with an error) from a start; `c` bounds how far the period may move
    (0.5c..2c)."""
    for _ in range(_EM_ITERATIONS):
        k = np.round((t - m.phase) / m.p)
        core, wide, dens = m.density(t - m.phase - k * m.p)
        rc, rw = core / dens, wide / dens
        r = rc + rw
        m.share = min(max(float(r.mean()), 1e-6), 1 - 1e-6)
        w = float(r.sum())
        if w < 2:
            break
        # Weighted least squares of t = phase + k * period, each event weighted by its
        # responsibility over its component's variance.
        q = rc / m.s ** 2 + rw / m.sw ** 2
        qs = float(q.sum())
        km, tm = float((q * k).sum() / qs), float((q * t).sum() / qs)
        var = float((q * (k - km) ** 2).sum())
        if var <= 0:
            break
        p_new = float((q * (k - km) * (t - tm)).sum() / var)
        if not 0.5 * c < p_new < 2 * c:
            break
        m.p, m.phase = p_new, tm - km * p_new
        e2 = (t - m.phase - k * m.p) ** 2
        # Two parameters (phase, period) came from the same events: divide by w - 2.
        wc = float(rc.sum())
        m.s = min(max(float(np.sqrt((rc * e2).sum() / max(wc - 2 * wc / w, 1.0))), sp.floor), m.p / 4)
        if sp.observed > 0:
            ww = float(rw.sum())
            m.v = min(max(ww / w, _WIDE_SHARE_MIN), 1 - _WIDE_SHARE_MIN)
            m.sw = min(max(float(np.sqrt((rw * e2).sum() / max(ww, 1e-9))), sp.observed, m.s),
                       _WIDE_MAX * sp.observed, m.p / 4)
    k = np.round((t - m.phase) / m.p)
    e = t - m.phase - k * m.p
    core, wide, dens = m.density(e)
    hit = (core + wide) / dens > 0.5
    ks = np.unique(k[hit])
    missed = int(ks[-1] - ks[0] + 1 - len(ks)) if len(ks) else 0
    jitter = float(np.std(e[hit]) / m.p) if hit.sum() > 1 else float("nan")
    first = float(ks[0]) if len(ks) else 0.0  # grid numbered from the first hit
    return PeriodFit(period=m.p, phase=m.phase + first * m.p, share=m.share, jitter=jitter,
                     llr=float(np.log(dens).sum()), events=len(t), hits=int(len(ks)),
                     missed=missed, extra=int(len(t) - len(ks)),
                     grid=np.where(hit, k - first, -1).astype(np.int64))


def _start(p: float, phase: float, share: float, s: float, sp: _Spreads) -> _Mix:
    if sp.observed <= 0:
        return _Mix(p, phase, share, max(s, sp.floor))
    return _Mix(p, phase, share, max(s, sp.floor), 0.5, min(2 * sp.observed, p / 4))


def _fit_from(t: np.ndarray, c: float, p: float, phase: float, share: float, s: float,
              sp: _Spreads) -> PeriodFit:
    wide = _em(t, c, _start(p, phase, share, s, sp), sp)
    # A wide start can settle on a spread that takes in neighbours (unrelated events, or
    # integer clocks off by one step) and a period pulled by them; restart narrow from
    # there and keep the likelier fit.
    narrow = _em(t, c, _start(wide.period, wide.phase, wide.share,
                              wide.jitter * wide.period / 4 if np.isfinite(wide.jitter) else 0.0, sp), sp)
    return narrow if narrow.llr > wide.llr else wide


def _fit_candidate(t: np.ndarray, c: float, sp: _Spreads) -> PeriodFit:
    """The likelier of two placements of the grid near `c`: the mean phase vector's peak
    (`_refine`, exact when the periodic events dominate) and the densest window
    (`_densest_window`, robust when unrelated events outnumber them)."""
    p = _refine(t, c)
    # Phase: the densest 3/20 of the phase circle.
    hist = np.bincount(np.minimum((np.mod(t - t[0], p) / p * 20).astype(int), 19),
                       minlength=20).astype(float)
    phase = t[0] + (int(np.argmax(hist + np.roll(hist, 1) + np.roll(hist, -1))) + 0.5) / 20 * p
    mean_vector = _fit_from(t, c, p, phase, 0.5, 0.05 * p, sp)
    p, phase, share = _densest_window(t, c)
    window = _fit_from(t, c, p, phase, min(max(share, 0.05), 0.95), p / _BINS, sp)
    return window if window.llr > mean_vector.llr else mean_vector


def _coverage_loglik(fit: PeriodFit) -> float:
    """Log-likelihood of which grid points had an event (each one with the fitted coverage
    c, independently): h log c + m log(1 - c), 0 when no point was missed."""
    h, m = fit.hits, fit.missed
    if h == 0 or m == 0:
        return 0.0
    c = h / (h + m)
    return float(h * np.log(c) + m * np.log(1 - c))


def _fundamental(t: np.ndarray, best: PeriodFit, sp: _Spreads) -> PeriodFit:
    """The winner, or a multiple of it that explains the train better once the grid points
    without an event count too.

    The mixture LLR prices a divisor P/k of the true period at log k per event, and charges
    nothing for the grid points it predicts that stay empty. A few unrelated events at the
    divisor's extra points then outweigh that price: events phase-locked to the period (a
    closed loop whose requests last about a period, their prefills landing half a period
    after each stall) put 2 of 11 pauses at the half points of a 0.7 s timer and the fit
    reported 0.35 s. A timer fires once per period, so an empty grid point is evidence: the
    multiple kP whose LLR plus coverage log-likelihood beats the winner's replaces it."""
    score = best.llr + _coverage_loglik(best)
    out = best
    for k in range(2, _DIVISIONS + 1):
        if (t[-1] - t[0]) / (k * best.period) < MIN_EVENTS - 1:
            break
        f = _fit_candidate(t, k * best.period, sp)
        if not f.significant or abs(f.period / (k * best.period) - 1) > _REFINE:
            continue
        s = f.llr + _coverage_loglik(f)
        if s > score:
            out, score = f, s
    return out


def fit_period(times: np.ndarray, quantum: float = 0.0, observed: float = 0.0) -> PeriodFit | None:
    """Fit a period to event times (any unit; `quantum` = 1 for integer clocks such as
    steps). `observed`: the scale (standard deviation) of the error the times were read
    with, 0 when exact: a stall seen only from the client starts at the last token before
    it, up to a step early. Some events then sit on the grid and some are displaced by up
    to a few times that; the on-grid events are fitted as a tight core plus a displaced
    share, so neither the core alone nor one wide spread has to explain both. None when
    there are too few events or no candidate period."""
    x = np.asarray(times, dtype=float)
    ok = np.flatnonzero(np.isfinite(x))
    order = ok[np.argsort(x[ok], kind="stable")]
    t = x[order]
    if len(t) < MIN_EVENTS or t[-1] <= t[0]:
        return None
    sp = _Spreads(_resolution(t, quantum), max(float(observed), 0.0))
    best: PeriodFit | None = None
    for c in _candidates(t, sp.floor):
        f = _fit_candidate(t, c, sp)
        if best is None or f.llr > best.llr:
            best = f
    if best is None:
        return None
    best = _fundamental(t, best, sp)
    grid = np.full(len(x), -1, dtype=np.int64)
    grid[order] = best.grid  # back to the caller's event order
    return replace(best, grid=grid)


def fit_on_grid(times: np.ndarray, grid: np.ndarray, quantum: float = 0.0) -> PeriodFit | None:
    """The period of the same events in another clock, on a grid already fitted in one
    clock (`grid` from that fit, aligned with `times` in the same event order, -1 = off
    the grid): so the periods reported in seconds and in steps count the same periods."""
    t = np.asarray(times, dtype=float)
    g = np.asarray(grid, dtype=np.int64)
    on = (g >= 0) & np.isfinite(t)
    if on.sum() < MIN_EVENTS or np.ptp(g[on]) <= 0:
        return None
    k, x = g[on].astype(float), t[on]
    p, phase = (float(v) for v in np.polyfit(k, x, 1))
    if not p > 0:
        return None
    e = x - phase - k * p
    s = min(max(float(np.sqrt(np.sum(e * e) / max(len(e) - 2, 1))), _resolution(np.sort(x), quantum)),
            p / 4)
    n = int(np.isfinite(t).sum())
    share = float(np.clip(on.sum() / n, 1e-6, 1 - 1e-6))
    _, dens = _density(e, share, p, s)
    # Events off this grid are uniform under both models: each adds log(1 - share).
    llr = float(np.log(dens).sum() + (n - on.sum()) * np.log(1 - share))
    ks = np.unique(g[on])
    return PeriodFit(period=p, phase=phase, share=share, jitter=float(np.std(e) / p), llr=llr,
                     events=n, hits=len(ks), missed=int(ks[-1] - ks[0] + 1 - len(ks)),
                     extra=n - len(ks), grid=np.where(on, g, -1))


def first_seen(values: np.ndarray) -> np.ndarray:
    """True where a value appears for the first time in the sequence (new batch shapes)."""
    _, idx = np.unique(np.asarray(values), return_index=True)
    out = np.zeros(len(values), dtype=bool)
    out[idx] = True
    return out
