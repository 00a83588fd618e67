"""A gate from start to end: check the runs measured the same load, pair their requests
when they sent the same ones (one run per side), evaluate every rule and collect what the
reader must know. Several runs per side are judged on the runs' own spread (`replicated`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from infbench.gate.compat import compare_runs, pair_requests
from infbench.gate.evaluate import FAIL, RuleResult, evaluate_rule, overall
from infbench.gate.replicated import evaluate_replicated
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
    runs: int = 2  # in all, both sides


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
    warnings += _run_warnings([base], [cand])
    verdict = overall(results)
    if verdict == FAIL and not any(r.run_noise for r in ruleset.rules) and not settings.run_noise:
        warnings.append("one run per side and no run_noise: these intervals assume the same build "
                        "does not drift between runs; on a shared host give each side several runs "
                        "(--baseline A --baseline B ...) or measure run_noise (`infbench gate noise`)")
    return GateOutcome(verdict, results, pairing is not None,
                       pairing.n if pairing is not None else 0, warnings)


def run_gate_runs(bases: list[RunSamples], cands: list[RunSamples], ruleset: RuleSet, *,
                  allow_different_workloads: bool = False) -> GateOutcome:
    """Every rule over several runs per side (at least three runs in all), each run one
    observation: see `replicated`. Every run must have measured the baseline's load."""
    if len(bases) == 1 and len(cands) == 1:
        return run_gate(bases[0], cands[0], ruleset, allow_different_workloads=allow_different_workloads)
    ids = [s.run.run_id for s in (*bases, *cands)]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is not None:
        raise ValueError(f"runs: {twice} given twice; each run is one observation, so give each once")
    warnings = []
    for s in (*bases[1:], *cands):
        diff = compare_runs(bases[0], s).differences
        if diff and not allow_different_workloads:
            raise WorkloadMismatch(f"run {s.run.run_id} ran a different workload from {bases[0].run.run_id} "
                                   f"({'; '.join(diff)}); pass --allow-different-workloads to compare them anyway")
        warnings += [f"workloads differ (allowed): {s.run.run_id}: {d}" for d in diff]
    rng = np.random.default_rng(ruleset.settings.seed)
    results = [evaluate_replicated(r, bases, cands, ruleset.settings, rng) for r in ruleset.rules]
    if ruleset.settings.run_noise or any(r.run_noise for r in ruleset.rules):
        warnings.append("run_noise in the rules is not added: several runs per side measure their own spread")
    warnings += _run_warnings(bases, cands)
    return GateOutcome(overall(results), results, False, 0, warnings, len(bases) + len(cands))


def _run_warnings(bases: list[RunSamples], cands: list[RunSamples]) -> list[str]:
    out = []
    for runs, who in ((bases, "baseline"), (cands, "candidate")):
        for s in runs:
            name = f"the {who} run" if len(runs) == 1 else f"{who} run {s.run.run_id}"
            if s.run.client_bound:
                out.append(f"{name} was client-bound: its latencies include load-generator delay")
            if s.run.status != "completed":
                out.append(f"{name} is {s.run.status} ({s.run.status_reason or 'no reason recorded'})")
    return out
