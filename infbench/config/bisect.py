"""`infbench config bisect`: find which differing settings cause a regression, by measurement.

Each probe launches the engine with the good configuration plus a subset of the bad one's
differing settings, runs the same workload with the same seed and size (so the runs pair
request by request), and asks the gate whether it regressed against the good baseline:
fail means the subset reproduces the regression, pass that it does not; an inconclusive
verdict reruns both sides with twice the requests, up to `max_doublings` times, and stays
unresolved after that. A probe is judged against a baseline measured right before or right
after it: where the run just before the probe was not the baseline, a fresh baseline is
measured after it. A host that slowed down since an older baseline (a busy neighbour arriving)
moves every run, and a probe compared with a baseline from before that looks like a regression
of its own (one named `kv_cache_dtype` alone, TTFT +20%, six runs after its baseline); a host
that sped up hides the culprit's regression the same way, and ddmin then names a larger set.
Delta debugging (Zeller and Hildebrandt's ddmin) narrows the set to a 1-minimal failing subset:
one knob, or a combination when knobs only hurt together. A knob whose effect is within the
gate's tolerance never makes a probe fail, so it is never part of the answer. Its worst case is n^2 + 3n probes for n settings, announced up front
as the budget together with the runs it allows; every run is stored and linked.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infbench.config.diff import AT_DEFAULT, IDENTITY, INERT, diff_sides, side_from
from infbench.config.impact import Workload
from infbench.config.launch import Launcher, LoadSpec, measure, scratch_dir
from infbench.config.store import StoredConfig
from infbench.gate import FAIL, INCONCLUSIVE, PASS, RuleSet
from infbench.gate.samples import open_samples
from infbench.gate.verdict import run_gate
from infbench.store import open_store

UNRESOLVED = "unresolved"
# Values an engine reports but nobody sets: outcomes of the memory plan or of other settings.
OUTCOMES = {"num_gpu_blocks", "kv_cache_tokens", "defaults", "engine_v1", "gpu_models", "gpu_count"}
# Settings whose default is computed from another one: they follow it unless set themselves.
DERIVED = {"cudagraph_capture_sizes": ("max_num_seqs", "cudagraph_max_capture_size"),
           "cudagraph_max_capture_size": ("max_num_seqs",)}


@dataclass
class Step:
    keys: tuple[str, ...]
    verdict: str
    reason: str
    runs: list[str] = field(default_factory=list)
    requests: int = 0


@dataclass
class BisectOutcome:
    bisection_id: str
    status: str  # found | not_reproduced | inconclusive
    culprit: list[str]
    keys: list[str]
    budget_runs: int
    runs_used: int
    steps: list[Step]


def bisect_keys(good: StoredConfig, bad: StoredConfig) -> dict[str, Any]:
    """The settings to bisect over (key -> the bad side's value), most impactful first."""
    r = diff_sides(side_from(good), side_from(bad), Workload(), ({}, {}))
    differing = {d.key for d in r.differences}
    out: dict[str, Any] = {}
    for d in r.differences:
        if d.key in IDENTITY or d.key in INERT or d.key in OUTCOMES:
            continue
        if d.b == AT_DEFAULT:
            continue  # the bad side left it at its default: no value to pass on a command line
        follows = DERIVED.get(d.key, ())
        if any(k in differing for k in follows) and "set" not in (d.origin_a, d.origin_b):
            continue
        out[d.key] = d.b
    return out


def budget(n: int, max_doublings: int) -> tuple[int, int]:
    """(probes, runs): ddmin's worst case n^2 + 3n probes; each probe, and the baseline at
    each request count, runs at most 1 + max_doublings times, and each probe's run may be
    followed by a fresh baseline to judge it against."""
    probes = n * n + 3 * n
    tries = 1 + max_doublings
    return probes, 2 * probes * tries + tries


def _split(items: list[str], n: int) -> list[list[str]]:
    size, rest = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < rest else 0)
        out.append(items[start:end])
        start = end
    return [s for s in out if s]


def ddmin(keys: list[str], test: Callable[[list[str]], str]) -> list[str]:
    """Zeller and Hildebrandt's ddmin: a 1-minimal subset of `keys` for which `test` says
    FAIL, given that the whole set fails (and the empty set passes). Anything but FAIL
    (pass, unresolved) counts as not reproducing."""
    c, n = list(keys), 2
    while len(c) >= 2:
        parts = _split(c, n)
        reduced = False
        for part in parts:
            if test(part) == FAIL:
                c, n, reduced = part, 2, True
                break
        if not reduced and n > 2:
            for part in parts:
                rest = [k for k in c if k not in part]
                if test(rest) == FAIL:
                    c, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(c):
                break
            n = min(len(c), 2 * n)
    return c


class Bisection:
    def __init__(self, db: Path, good: StoredConfig, bad: StoredConfig, launcher: Launcher,
                 load: LoadSpec, rules: RuleSet, *, keys: list[str] | None = None,
                 max_doublings: int = 2, say: Callable[[str], None] = print) -> None:
        self.db, self.good, self.bad = db, good, bad
        self.launcher, self.load, self.rules = launcher, load, rules
        self.max_doublings, self.say = max_doublings, say
        found = bisect_keys(good, bad)
        if keys is not None:
            unknown = [k for k in keys if k not in found]
            if unknown:
                raise ValueError(f"keys: {', '.join(unknown)} do not differ between the configs "
                                 f"(differing: {', '.join(found) or 'none'})")
            found = {k: found[k] for k in keys}
        self.values = found
        self.keys = list(found)
        self.budget_probes, self.budget_runs = budget(len(self.keys), max_doublings)
        self.id = "bis-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        self.steps: list[Step] = []
        self.cache: dict[frozenset[str], Step] = {}
        self.baselines: dict[int, str] = {}
        self.last_run: str | None = None  # the run measured most recently, of either side
        self.runs_used = 0
        self.probe_idx = 0

    # ---- store ------------------------------------------------------------------------------
    def _execute(self, sql: str, params: list[Any]) -> None:
        con = open_store(self.db)  # closed again at once: each probe's `infbench run` writes it
        try:
            con.execute(sql, params)
        finally:
            con.close()

    def _record_run(self, run_id: str, keys: tuple[str, ...], verdict: str, reason: str) -> None:
        con = open_store(self.db)
        try:
            row = con.execute("SELECT config_id FROM configs WHERE run_id = ? LIMIT 1", [run_id]).fetchone()
            con.execute("INSERT INTO bisect_probes VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [self.id, self.probe_idx, run_id, row[0] if row else None, json.dumps(list(keys)),
                         verdict, reason])
        finally:
            con.close()
        self.probe_idx += 1

    def _finish(self, status: str, culprit: list[str]) -> None:
        result = {"steps": [{"keys": list(s.keys), "verdict": s.verdict, "reason": s.reason,
                             "runs": s.runs, "requests": s.requests} for s in self.steps],
                  "runs_used": self.runs_used, "budget_probes": self.budget_probes}
        self._execute("UPDATE bisections SET status = ?, culprit = ?, result = ? WHERE bisection_id = ?",
                      [status, json.dumps(culprit), json.dumps(result), self.id])

    # ---- measuring --------------------------------------------------------------------------
    def _run(self, keys: tuple[str, ...], requests: int, log_dir: Path) -> str:
        if self.runs_used >= self.budget_runs:
            raise RuntimeError(f"the announced budget of {self.budget_runs} runs is spent")
        settings = {k: self.values[k] for k in keys}
        with self.launcher.running(settings, log_dir) as url:
            run_id = measure(url, self.db, self.load, requests)
        self.runs_used += 1
        self.last_run = run_id
        return run_id

    def _baseline(self, requests: int, log_dir: Path, fresh: bool = False) -> str:
        if fresh or requests not in self.baselines:
            run_id = self._run((), requests, log_dir)
            self.baselines[requests] = run_id
            self._record_run(run_id, (), "baseline", f"the good configuration, {requests} requests"
                             + (", measured again right after a probe" if fresh else ""))
        return self.baselines[requests]

    def _judge(self, base: str, cand: str) -> tuple[str, str]:
        outcome = run_gate(open_samples(base, self.db), open_samples(cand, self.db), self.rules)
        worst = [r for r in outcome.results if r.verdict == outcome.verdict] or outcome.results
        worst.sort(key=lambda r: -abs(r.change or 0.0))
        r = worst[0]
        if r.change is None or r.ci is None:
            return outcome.verdict, f"{r.rule}: {r.reason}"
        fmt = (lambda v: f"{v:+.1%}") if r.relative else (lambda v: f"{v:+.3g}")
        return outcome.verdict, f"{r.rule} {fmt(r.change)} [{fmt(r.ci[0])}, {fmt(r.ci[1])}]"

    def test(self, keys: list[str], log_dir: Path) -> str:
        key = frozenset(keys)
        if not key:
            return PASS  # the good configuration itself
        if key in self.cache:
            return self.cache[key].verdict
        ordered = tuple(k for k in self.keys if k in key)
        step = Step(ordered, UNRESOLVED, "")
        requests = self.load.num_requests
        for attempt in range(1 + self.max_doublings):
            base = self._baseline(requests, log_dir)
            adjacent = self.last_run == base
            run_id = self._run(ordered, requests, log_dir)
            verdict, reason = self._judge(base, run_id)
            if verdict != INCONCLUSIVE and not adjacent:
                base = self._baseline(requests, log_dir, fresh=True)
                verdict, reason = self._judge(base, run_id)
                reason += " against a baseline measured right after it"
            step.runs.append(run_id)
            step.requests, step.reason = requests, reason
            self._record_run(run_id, ordered, verdict, reason)
            if verdict != INCONCLUSIVE:
                step.verdict = verdict
                break
            if attempt < self.max_doublings:
                self.say(f"  inconclusive with {requests} requests ({reason}); doubling")
                requests *= 2
        self.steps.append(step)
        self.cache[key] = step
        shown = ", ".join(ordered) if len(ordered) <= 4 else f"{len(ordered)} settings"
        self.say(f"probe {len(self.steps)}: {shown} -> {step.verdict} ({step.reason})")
        return step.verdict

    # ---- delta debugging --------------------------------------------------------------------
    def ddmin(self, keys: list[str], log_dir: Path) -> list[str]:
        return ddmin(keys, lambda subset: self.test(subset, log_dir))

    def run(self) -> BisectOutcome:
        self._execute(
            "INSERT INTO bisections VALUES (?, ?, ?, ?, ?, ?, ?, 'running', NULL, NULL)",
            [self.id, datetime.now(UTC).replace(tzinfo=None), self.good.config_id, self.bad.config_id,
             self.launcher.template, json.dumps(self.load.describe()), self.budget_runs])
        status, culprit = "inconclusive", []
        try:
            with scratch_dir() as tmp:
                log_dir = Path(tmp)
                if not self.keys:
                    status = "not_reproduced"
                elif (whole := self.test(self.keys, log_dir)) != FAIL:
                    status = "not_reproduced" if whole == PASS else "inconclusive"
                else:
                    culprit = self.ddmin(self.keys, log_dir)
                    status = "found"
        except BaseException:
            self._finish("failed", culprit)
            raise
        self._finish(status, culprit)
        return BisectOutcome(self.id, status, culprit, self.keys, self.budget_runs, self.runs_used,
                             self.steps)
