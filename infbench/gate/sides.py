"""What each rule compares in a run: the statistic (a per-request quantile or mean, ITL
over whole requests, or a rate) over the run's requests or over the requests two runs share,
with when each request was in flight; and the checks that a run can support it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from infbench.gate.compat import Pairing
from infbench.gate.rules import METRICS, GateSettings, Rule
from infbench.gate.samples import RunSamples
from infbench.gate.stats import Clustered, Mean, Quantile, Rate, Statistic, Sum

MIN_TAIL = 10  # samples beyond a quantile needed to estimate it at all


class NotEnoughData(Exception):
    """A run cannot support the statistic; the message says what is missing."""


def need(ok: bool, message: str) -> None:
    if not ok:
        raise NotEnoughData(message)


def quantile_support(n: int, q: float | None, what: str, settings: GateSettings) -> None:
    need(n >= settings.min_requests, f"{n} {what}, fewer than min_requests = {settings.min_requests}")
    if q is not None:
        tail = n * min(q, 1.0 - q)
        least = math.ceil(MIN_TAIL / min(q, 1.0 - q))
        need(tail >= MIN_TAIL, f"p{q * 100:g} needs at least {least} {what}, has {n}")


def _good(s: RunSamples, slo: dict[str, float]) -> np.ndarray:
    ok = np.ones(s.n_requests, dtype=bool)
    if "ttft" in slo:
        ok &= s.per_request["ttft_intended"] <= slo["ttft"]
    if "tpot" in slo:
        ok &= np.nan_to_num(s.per_request["tpot"], nan=0.0) <= slo["tpot"]
    if "e2el" in slo:
        ok &= s.per_request["e2el_intended"] <= slo["e2el"]
    return ok.astype(float)


def goodput_slo(rule: Rule, base: RunSamples, cand: RunSamples) -> dict[str, float]:
    if rule.slo_ms:
        return rule.slo_ms
    b, c = base.slo_ms, cand.slo_ms
    need(bool(b) and b == c, "goodput needs an slo in the rule (the runs recorded "
                              f"{b or 'none'} and {c or 'none'})")
    return b


def _rate_weights(rule: Rule, s: RunSamples, slo: dict[str, float] | None) -> np.ndarray:
    if rule.statistic == "goodput":
        return _good(s, slo or {})
    if rule.metric == "requests":
        return np.ones(s.n_requests)
    if rule.metric == "output_tokens":
        return s.output_tokens
    return s.output_tokens + s.prompt_tokens


def steady_window(s: RunSamples) -> tuple[float, float]:
    """From the first completion to the last send: before it the load fills, after it it
    drains, and how long either takes depends on which requests happened to come first and
    last, not on the server's speed under load."""
    return float(s.done_s.min()), float(s.send_s.max())


def _rate(rule: Rule, s: RunSamples, rows: np.ndarray, slo: dict[str, float] | None) -> Statistic:
    """The steady rate of the requests `rows`, anchored to the whole run (with every row drawn
    once it is the run's own rate).

    A closed loop holds its concurrency, so a slower server shows as more time in flight per
    token: slots x tokens / time in flight (`stats.Rate`). An open loop's arrivals do
    not wait for the server: the rate is the tokens delivered inside the steady window per
    second, each request counted for the share of its time in flight that fell inside (a
    server that falls behind delivers less of them there); two open-loop runs that did not
    share their schedule also differ by their arrival counts (Poisson: 1 / n in the log)."""
    need(s.n_requests > 0, "no completed requests")
    t0, t1 = steady_window(s)
    need(t1 > t0, "no steady part: every request was sent before the first one completed "
                  "(a rate needs a longer run)")
    busy = s.done_s - s.send_s
    inside = np.clip(np.minimum(s.done_s, t1) - np.maximum(s.send_s, t0), 0.0, None)
    w = _rate_weights(rule, s, slo)
    arrivals = s.config.get("arrivals") or {}
    if arrivals.get("kind") == "closed":
        # The loop's configured slots, not the measured mean in flight: a client late to send
        # the next request leaves a slot idle, and that is the client's slowness, not the
        # server's (the run is flagged client-bound); the server's shows in time in flight.
        slots = arrivals.get("concurrency")
        level = float(slots) if isinstance(slots, int | float) and slots > 0 else float(inside.sum()) / (t1 - t0)
        return Rate(w[rows], busy[rows], level)
    share = np.divide(inside, busy, out=np.zeros_like(inside), where=busy > 0)
    x = w * share
    sub = float(x[rows].sum())
    scale = float(x.sum()) / sub / (t1 - t0) if sub > 0 else 0.0
    return Sum(x[rows], scale, 1.0 / max(float(share.sum()), 1.0))


def _itl(s: RunSamples, rows: np.ndarray, q: float | None) -> Clustered:
    """ITL gaps of the requests `rows`, owned by their position in `rows`."""
    pos = np.full(s.n_requests, -1, dtype=np.int64)
    pos[rows] = np.arange(rows.size)
    owner = pos[s.itl.owner]
    keep = owner >= 0
    return Clustered(s.itl.values[keep], owner[keep], int(rows.size), q)


def _request_stat(x: np.ndarray, q: float | None) -> Statistic:
    return Mean(x) if q is None else Quantile(x, q)


@dataclass(frozen=True)
class Side:
    """One run's statistic over its resampling units, with when each unit was in flight."""

    stat: Statistic
    start: np.ndarray
    end: np.ndarray


def _side(s: RunSamples, stat: Statistic, rows: np.ndarray) -> Side:
    return Side(stat, s.send_s[rows], s.done_s[rows])


def run_side(rule: Rule, s: RunSamples, settings: GateSettings, slo: dict[str, float] | None) -> Side:
    """One run's statistic of a per-request, ITL or rate rule, over all its requests."""
    family, q = METRICS[rule.metric].family, rule.quantile
    if family == "request":
        rows = np.flatnonzero(np.isfinite(s.per_request[rule.metric]))
        quantile_support(rows.size, q, "requests", settings)
        return _side(s, _request_stat(s.per_request[rule.metric][rows], q), rows)
    quantile_support(s.n_requests, None, "requests", settings)
    rows = np.arange(s.n_requests)
    if family == "itl":
        quantile_support(s.itl.values.size, q, "gaps", settings)
        return _side(s, _itl(s, rows, q), rows)
    return _side(s, _rate(rule, s, rows, slo), rows)


def paired_sides(rule: Rule, base: RunSamples, cand: RunSamples, pairing: Pairing,
                 settings: GateSettings, slo: dict[str, float] | None) -> tuple[Side, Side]:
    """Both runs' statistics over the same requests, unit i being the same request in each."""
    family, q = METRICS[rule.metric].family, rule.quantile
    pb, pc = pairing.base_rows, pairing.cand_rows
    if family == "request":
        x, y = base.per_request[rule.metric][pb], cand.per_request[rule.metric][pc]
        ok = np.isfinite(x) & np.isfinite(y)
        quantile_support(int(ok.sum()), q, "paired requests", settings)
        return (_side(base, _request_stat(x[ok], q), pb[ok]), _side(cand, _request_stat(y[ok], q), pc[ok]))
    quantile_support(pairing.n, None, "paired requests", settings)
    if family == "itl":
        sb, sc = _itl(base, pb, q), _itl(cand, pc, q)
        quantile_support(min(sb.values.size, sc.values.size), q, "gaps", settings)
        return _side(base, sb, pb), _side(cand, sc, pc)
    return _side(base, _rate(rule, base, pb, slo), pb), _side(cand, _rate(rule, cand, pc, slo), pc)
