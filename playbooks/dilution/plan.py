"""The re-runs that measure each dilution: which properties differ, which mixes of the two
runs to send, and each mix's requests, as plain data (a recipe per re-run).

A mix takes each property from the production run where it is swapped in and from the
benchmark otherwise; request i of a re-run takes row i of each property's source run (rows
reused in order when the budget asks for more), so a property keeps its joint shape within
its run, and the mix with every property swapped sends production's own requests. The prefix
is carried as a share of the prompt, so a re-run with production's input lengths keeps the
benchmark's prefix share. Attribution `one-at-a-time` runs the baseline (nothing swapped),
each differing property alone, and all of them; `shapley` runs every subset (2^K runs).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from playbooks.dilution.properties import PROPERTIES, RunProfile

ATTRIBUTIONS = ("one-at-a-time", "shapley")
# A property differs when its distributions differ by more than this (two-sample KS
# statistic, or the difference of the shares / CV²) or their means by more than MEAN_REL.
KS_DIFFERS = 0.10
MEAN_REL = 0.05
SHARE_DIFFERS = 0.02
CV2_DIFFERS = 0.3
SLOTS_REL = 0.10


def config_name(swapped: frozenset[str], differing: tuple[str, ...]) -> str:
    if not swapped:
        return "baseline"
    if len(swapped) == len(differing) and len(differing) > 1:
        return "all"
    return "+".join(p for p in PROPERTIES if p in swapped)


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.union1d(a, b)
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def _lengths_differ(a: np.ndarray, b: np.ndarray) -> bool:
    rel = abs(a.mean() - b.mean()) / max(a.mean(), 1e-9)
    return _ks(a, b) > KS_DIFFERS or rel > MEAN_REL


def _cv2(p: RunProfile) -> float:
    gaps = np.diff(np.sort(p.at_s))
    return float(gaps.var(ddof=1) / gaps.mean() ** 2) if len(gaps) > 2 and gaps.mean() > 0 else 0.0


def differences(bench: RunProfile, prod: RunProfile) -> tuple[list[str], dict[str, str]]:
    """(properties that differ, why each other one is not swapped)."""
    out: list[str] = []
    why: dict[str, str] = {}
    for name in PROPERTIES:
        gone = prod.missing.get(name) or bench.missing.get(name)
        if gone is not None:
            side = "production" if name in prod.missing else "benchmark"
            why[name] = f"not measured in the {side} run: {gone}"
            continue
        if name == "input_lengths":
            differs = _lengths_differ(bench.input_tokens, prod.input_tokens)
        elif name == "output_lengths":
            differs = _lengths_differ(bench.output_tokens, prod.output_tokens)
        elif name == "prefix_share":
            b, p = bench.figures["prefix_share"]["share"], prod.figures["prefix_share"]["share"]
            differs = abs(b - p) > SHARE_DIFFERS
        elif name == "arrivals":
            if (bench.closed_slots is None) != (prod.closed_slots is None):
                differs = True
            elif bench.closed_slots is not None and prod.closed_slots is not None:
                differs = abs(bench.closed_slots - prod.closed_slots) > SLOTS_REL * bench.closed_slots
            else:
                rate = [float(x.figures["arrivals"].get("rate_per_s") or 0.0) for x in (bench, prod)]
                differs = (abs(_cv2(bench) - _cv2(prod)) > CV2_DIFFERS
                           or abs(rate[0] - rate[1]) > MEAN_REL * max(rate[0], 1e-9))
        elif name == "sampling":
            differs = bench.temperature != prod.temperature
        else:
            differs = abs(float(bench.structured.mean()) - float(prod.structured.mean())) > SHARE_DIFFERS
        if differs:
            out.append(name)
        else:
            why[name] = "the same in both runs (within the thresholds of playbooks/dilution/plan.py)"
    return out, why


@dataclass(frozen=True)
class Budget:
    requests: int    # per re-run
    seconds: float   # per re-run: sending stops then (in-flight requests finish)
    repeats: int = 1

    def validate(self) -> None:
        if self.requests < 1:
            raise ValueError(f"requests: a re-run needs at least 1 request, got {self.requests}")
        if not self.seconds > 0:
            raise ValueError(f"seconds: must be > 0, got {self.seconds:g}")
        if self.repeats < 1:
            raise ValueError(f"repeats: must be >= 1, got {self.repeats}")


@dataclass
class Plan:
    bench: RunProfile
    prod: RunProfile
    differing: tuple[str, ...]
    not_swapped: dict[str, str]
    attribution: str
    budget: Budget
    configs: list[frozenset[str]] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.configs) * self.budget.repeats

    def describe(self, url: str | None) -> list[str]:
        """What will be sent, before anything is: printed by the command, and by --dry-run."""
        b = self.budget
        names = [config_name(c, self.differing) for c in self.configs]
        lines = [f"dilution: benchmark {self.bench.run_id} vs production {self.prod.run_id}; "
                 f"differing: {', '.join(self.differing) or 'none'}"]
        for name in PROPERTIES:
            lines.append(f"  {name}: benchmark {_brief(self.bench, name)} | production {_brief(self.prod, name)}")
        lines += [f"  not swapped: {k}: {v}" for k, v in self.not_swapped.items()]
        if not self.configs:
            return [*lines, "  nothing differs that a re-run could swap: no re-run"]
        lines.append(f"  attribution: {self.attribution}; re-runs: {', '.join(names)}"
                     f" x {b.repeats} repeat(s) = {self.runs} run(s)")
        lines.append(f"  budget: each re-run at most {b.requests} requests and {b.seconds:g} s; "
                     f"in all at most {self.runs * b.requests} requests and {self.runs * b.seconds:g} s "
                     f"of sending against {url or 'the benchmark run target'}")
        return lines


def _brief(p: RunProfile, name: str) -> str:
    f = p.figures.get(name, {})
    if name in ("input_lengths", "output_lengths"):
        return f"mean {f.get('mean') or 0:,.0f}, p50 {f.get('p50') or 0:,.0f}, p90 {f.get('p90') or 0:,.0f} tokens"
    if name == "prefix_share":
        return "not measured" if p.shared_share is None else f"{f.get('share', 0):.1%} ({f.get('source')})"
    if name == "arrivals":
        if p.closed_slots is not None:
            return f"closed loop, {p.closed_slots} slots (mean in flight {f.get('mean_in_flight') or 0:.1f})"
        return (f"open loop, {f.get('rate_per_s') or 0:.2f}/s, inter-arrival CV² {f.get('gap_cv2') or 0:.2f} "
                f"(mean in flight {f.get('mean_in_flight') or 0:.1f})")
    if name == "sampling":
        return "not recorded" if p.temperature is None else f"temperature {p.temperature:g}"
    return f"{p.structured.mean():.0%} of requests with a JSON schema"


def make_plan(bench: RunProfile, prod: RunProfile, attribution: str, budget: Budget) -> Plan:
    if attribution not in ATTRIBUTIONS:
        raise ValueError(f"attribution: {attribution!r} is not one of {', '.join(ATTRIBUTIONS)}")
    budget.validate()
    differing, why = differences(bench, prod)
    plan = Plan(bench, prod, tuple(differing), why, attribution, budget)
    if not differing:
        return plan
    if attribution == "shapley":
        plan.configs = [frozenset(c) for k in range(len(differing) + 1)
                        for c in itertools.combinations(differing, k)]
    else:
        plan.configs = [frozenset(), *(frozenset([p]) for p in differing)]
        if len(differing) > 1:
            plan.configs.append(frozenset(differing))
    return plan


def _pick(values: np.ndarray, n: int) -> np.ndarray:
    return values[np.arange(n) % len(values)]


def _offsets(p: RunProfile, n: int) -> list[float]:
    """n send offsets from the run's schedule, repeated after its end (one mean gap later)."""
    at = np.sort(p.at_s)
    span = float(at[-1] - at[0]) + (float(np.diff(at).mean()) if len(at) > 1 else 1.0)
    return [float(at[i % len(at)] - at[0] + (i // len(at)) * span) for i in range(n)]


def recipe(plan: Plan, swapped: frozenset[str], *, repeat: int, session: str, seed: int) -> dict[str, Any]:
    """One re-run's requests and settings (`infbench.pipeline.replay` sends it)."""
    n = plan.budget.requests
    src = {name: plan.prod if name in swapped else plan.bench for name in PROPERTIES}
    inputs = _pick(src["input_lengths"].input_tokens, n)
    outputs = _pick(src["output_lengths"].output_tokens, n)
    share_src = src["prefix_share"].shared_share
    shares = _pick(share_src, n) if share_src is not None else np.zeros(n)
    structured = src["structured"]
    schemas = [structured.schema_labels[i % structured.requests] for i in range(n)]
    arr = src["arrivals"]
    at: list[float | None] = [None] * n if arr.closed_slots is not None else list(_offsets(arr, n))
    rows = [{"input_tokens": max(1, int(i)), "output_tokens": max(1, int(o)),
             "shared_tokens": int(round(s * i)), "schema": sc, "at": t}
            for i, o, s, sc, t in zip(inputs.tolist(), outputs.tolist(), shares.tolist(), schemas, at,
                                      strict=True)]
    name = config_name(swapped, plan.differing)
    temperature = src["sampling"].temperature
    return {
        "name": name, "swapped": [p for p in PROPERTIES if p in swapped], "rows": rows,
        "model": plan.bench.model, "endpoint": plan.bench.endpoint,
        "arrivals": ({"kind": "closed", "concurrency": arr.closed_slots} if arr.closed_slots is not None
                     else {"kind": "trace"}),
        "temperature": 0.0 if temperature is None else temperature,
        "structured_workload": (structured.config.get("workload")
                                if structured.structured.any() else None),
        "num_requests": n, "duration_s": plan.budget.seconds, "seed": seed,
        "tags": {"dilution": {"session": session, "bench": plan.bench.run_id,
                              "prod": plan.prod.run_id, "config": name,
                              "swapped": [p for p in PROPERTIES if p in swapped],
                              "repeat": repeat, "attribution": plan.attribution}},
    }


def recipes(plan: Plan, session: str, seed: int = 0) -> list[dict[str, Any]]:
    """Every re-run of the plan, repeats interleaved (baseline, swaps, ..., then again), so a
    drift of the target over the session spreads over all of them rather than one."""
    return [recipe(plan, c, repeat=r, session=session, seed=seed)
            for r in range(plan.budget.repeats) for c in plan.configs]
