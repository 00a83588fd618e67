"""A gate from start to end: check the runs measured the same load, pair their requests
when they sent the same ones, evaluate every rule and collect what the reader must know."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from infbench.gate.compat import compare_runs, pair_requests
from infbench.gate.evaluate import RuleResult, evaluate_rule, overall
from infbench.gate.rules import RuleSet
from infbench.gate.samples import RunSamples


class WorkloadMismatch(ValueError):
    """The runs ran different loads and the caller did not allow it."""


@dataclass
class GateOutcome:
    verdict: str
    results: list[RuleResult]
    paired: bool  # per-request rules compared request by request
    paired_requests: int
    warnings: list[str]


def run_gate(base: RunSamples, cand: RunSamples, ruleset: RuleSet, *,
             allow_different_workloads: bool = False) -> GateOutcome:
    settings = ruleset.settings
    comparison = compare_runs(base, cand)
    if comparison.differences and not allow_different_workloads:
        raise WorkloadMismatch(f"baseline and candidate ran different workloads "
                               f"({'; '.join(comparison.differences)}); "
                               "pass --allow-different-workloads to compare them anyway")
    warnings = [f"workloads differ (allowed): {d}" for d in comparison.differences]
    pairing = None
    if comparison.same_requests:
        pairing, why = pair_requests(base, cand, settings.min_requests)
        if why:
            warnings.append(why)
    elif comparison.note:
        warnings.append(comparison.note)
    rng = np.random.default_rng(settings.seed)
    results = [evaluate_rule(r, base, cand, settings, rng, pairing) for r in ruleset.rules]
    for s, who in ((base, "baseline"), (cand, "candidate")):
        if s.run.client_bound:
            warnings.append(f"the {who} run was client-bound: its latencies include load-generator delay")
        if s.run.status != "completed":
            warnings.append(f"the {who} run is {s.run.status} ({s.run.status_reason or 'no reason recorded'})")
    return GateOutcome(overall(results), results, pairing is not None,
                       pairing.n if pairing is not None else 0, warnings)
