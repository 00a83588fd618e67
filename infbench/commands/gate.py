"""`infbench gate`, `infbench gate plan` and `infbench compare`: statistical regression gates
for CI and a side-by-side view of two runs. Exit codes: 0 pass, 1 fail, 2 usage error."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import typer
from rich.table import Table
from rich.text import Text

from infbench.command_support import fail
from infbench.console import make_console, print_warning
from infbench.gate import FAIL, INCONCLUSIVE, PASS, RuleResult, load_rules
from infbench.gate.compat import compare_runs
from infbench.gate.noise import measure_noise
from infbench.gate.plan import plan_rule
from infbench.gate.report import (
    change_text,
    gate_document,
    pairing_text,
    to_json,
    to_junit,
    to_markdown,
)
from infbench.gate.rules import INCONCLUSIVE as INCONCLUSIVE_CHOICES
from infbench.gate.rules_file import write_run_noise
from infbench.gate.samples import open_samples
from infbench.gate.verdict import run_gate_runs
from infbench.store import StoreError

app = typer.Typer(help="Statistical performance gates: pass, fail or inconclusive, with intervals. Runs that "
                       "sent the same requests (same load, --seed and --num-requests) are compared request "
                       "by request. Exit codes: 0 pass, 1 fail (inconclusive too, unless --inconclusive "
                       "pass), 2 usage error.",
                  no_args_is_help=False, invoke_without_command=True)

DB_OPTION = typer.Option(Path("infbench.duckdb"), help="Store holding runs named by id.")
_STYLE = {PASS: "bold green", FAIL: "bold red", INCONCLUSIVE: "bold yellow"}


@app.callback()
def gate(
    ctx: typer.Context,
    baseline: list[str] = typer.Option([], help="Baseline: run id/prefix/'last' in --db, or a store FILE\\[@RUN]. Repeat for several runs of the baseline: judged on the runs' own spread."),
    candidate: list[str] = typer.Option([], help="Candidate: run id/prefix/'last' in --db, or a store FILE\\[@RUN]. Repeatable, as --baseline."),
    rules: Path | None = typer.Option(None, help="gates.toml (default: built-in rules for TTFT, TPOT, E2E, throughput)."),
    db: Path = DB_OPTION,
    inconclusive: str | None = typer.Option(None, help="pass | fail: exit code of an inconclusive verdict (default: the rules file's, else fail)."),
    allow_different_workloads: bool = typer.Option(False, help="Compare runs even when their workloads differ."),
    markdown: Path | None = typer.Option(None, help="Write a Markdown summary (pull-request comment) here."),
    junit: Path | None = typer.Option(None, help="Write JUnit XML here (one test case per rule)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Compare a candidate run with a baseline, rule by rule, with confidence intervals.

    Runs that sent the same requests (same workload fingerprint) are compared request by
    request; others are compared unpaired, with a warning. With several runs on a side
    (three or more in all), each run is one observation and the interval comes from the
    runs' own spread (Student t): what a shared host needs, where the same build drifts
    from run to run."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        if not baseline or not candidate:
            raise ValueError(f"{'candidate' if baseline else 'baseline'}: required (--baseline RUN --candidate RUN)")
        if inconclusive is not None and inconclusive not in INCONCLUSIVE_CHOICES:
            raise ValueError(f"inconclusive: {inconclusive!r} is not pass or fail")
        ruleset = load_rules(rules)
        if inconclusive is not None:
            ruleset = dataclasses.replace(ruleset, settings=dataclasses.replace(ruleset.settings,
                                                                                inconclusive=inconclusive))
        settings = ruleset.settings
        bases, cands = [open_samples(b, db) for b in baseline], [open_samples(c, db) for c in candidate]
        outcome = run_gate_runs(bases, cands, ruleset, allow_different_workloads=allow_different_workloads)
    except (ValueError, StoreError) as exc:
        raise fail(str(exc)) from None
    results = outcome.results
    doc = gate_document(outcome.verdict, results, {
        "baseline": ", ".join(s.run.run_id for s in bases), "candidate": ", ".join(s.run.run_id for s in cands),
        "baseline_runs": [s.run.run_id for s in bases], "candidate_runs": [s.run.run_id for s in cands],
        "baseline_requests": sum(s.n_requests for s in bases),
        "candidate_requests": sum(s.n_requests for s in cands),
        "paired": outcome.paired, "paired_requests": outcome.paired_requests,
        "confidence": settings.confidence, "run_noise": settings.run_noise,
        "inconclusive_counts_as": settings.inconclusive, "warnings": outcome.warnings})
    if markdown is not None:
        markdown.write_text(to_markdown(doc, results), encoding="utf-8")
    if junit is not None:
        junit.write_text(to_junit(doc, results, settings.inconclusive == "fail"), encoding="utf-8")
    if json_out:
        sys.stdout.write(to_json(doc))
    else:
        _print_table(doc, results)
    failing = outcome.verdict == FAIL or (outcome.verdict == INCONCLUSIVE and settings.inconclusive == "fail")
    raise typer.Exit(1 if failing else 0)


def _print_table(doc: dict, results: list[RuleResult]) -> None:
    console = make_console()
    t = Table(title=f"gate: baseline {doc['baseline']} vs candidate {doc['candidate']} "
                    f"({doc['confidence']:.0%} intervals; {pairing_text(doc)})", title_justify="left")
    for c in ("rule", "baseline", "candidate", "change [interval]", "limit", "verdict"):
        t.add_column(c, justify="left" if c in ("rule", "verdict") else "right")
    for r in results:
        t.add_row(Text(f"{r.rule} ({r.direction} is better)"),
                  "-" if r.baseline is None else f"{r.baseline:.4g} {r.unit}",
                  "-" if r.candidate is None else f"{r.candidate:.4g} {r.unit}",
                  change_text(r), r.tolerance, f"[{_STYLE[r.verdict]}]{r.verdict}[/]")
    console.print(t)
    for r in results:
        if r.verdict != PASS:
            console.print(f"  {r.rule}: {r.reason}", highlight=False, markup=False)
    spreads = [f"{r.rule} {r.run_spread:.1%}" for r in results if r.run_spread is not None]
    if spreads:
        console.print(f"  the runs' own spread per run: {', '.join(spreads)}", highlight=False, markup=False)
    for w in doc["warnings"]:
        print_warning(w, console)
    console.print(f"verdict: [{_STYLE[doc['verdict']]}]{doc['verdict'].upper()}[/]")


@app.command("plan")
def plan(
    baseline: str = typer.Option(..., help="Baseline run (id/prefix/'last' in --db, or FILE\\[@RUN])."),
    rules: Path | None = typer.Option(None, help="gates.toml (default: the built-in rules)."),
    change: float = typer.Option(0.10, help="Regression to detect, as a fraction (0.10 = 10% worse)."),
    power: float = typer.Option(0.8, help="Probability of catching that regression."),
    db: Path = DB_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout."),
) -> None:
    """Size a canary from a baseline's variance: how much data detects a given change."""
    try:
        if not 0.0 < change < 10.0:
            raise ValueError(f"change: must be a fraction in (0, 10), got {change}")
        if not 0.5 <= power < 1.0:
            raise ValueError(f"power: must be in [0.5, 1), got {power}")
        ruleset = load_rules(rules)
        base = open_samples(baseline, db)
    except (ValueError, StoreError) as exc:
        raise fail(str(exc)) from None
    rng = np.random.default_rng(ruleset.settings.seed)
    rows = [plan_rule(r, base, ruleset.settings, change, power, rng) for r in ruleset.rules]
    if json_out:
        sys.stdout.write(json.dumps({"baseline": base.run.run_id, "change": change, "power": power,
                                     "confidence": ruleset.settings.confidence,
                                     "run_noise": ruleset.settings.run_noise,
                                     "rules": [r.as_dict() for r in rows]}, indent=2) + "\n")
        return
    t = Table(title=f"canary size to catch a {change:.0%} regression with {power:.0%} power "
                    f"(baseline {base.run.run_id}, {base.n_requests} requests)", title_justify="left")
    for c in ("rule", "baseline", "rel. s.e.", "to catch", "≈ time", "to clear unchanged", "≈ time"):
        t.add_column(c, justify="left" if c == "rule" else "right")

    def size(v: float | None, unit: str) -> str:
        return "never" if v is None else f"{int(np.ceil(v)):,} {unit}"

    def secs(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f} s"

    for r in rows:
        t.add_row(Text(r.rule), "-" if r.baseline_value is None else f"{r.baseline_value:.4g}",
                  "-" if r.relative_se is None else f"{r.relative_se:.2%}",
                  size(r.to_detect, r.unit_of_size), secs(r.seconds_to_detect),
                  size(r.to_clear, r.unit_of_size), secs(r.seconds_to_clear))
    console = make_console()
    console.print(t)
    for r in rows:
        if r.note:
            console.print(f"  {r.rule}: {r.note}", highlight=False, markup=False)


@app.command("noise")
def noise(
    runs: list[str] = typer.Argument(..., help="Three or more runs of one build and workload (id/prefix, or FILE\\[@RUN])."),
    rules: Path | None = typer.Option(None, help="gates.toml whose rules to measure (default: the built-in rules)."),
    db: Path = DB_OPTION,
    write: Path | None = typer.Option(None, help="Write the rules, with their measured run_noise and everything else kept, to this TOML file."),
    allow_different_workloads: bool = typer.Option(False, help="Measure even when the runs' workloads differ."),
    json_out: bool = typer.Option(False, "--json", help="Print the measurement as JSON on stdout."),
) -> None:
    """Measure run-to-run noise from repeated A/A runs, for each rule's run_noise.

    The run_noise column is exactly what --write puts in the file (the estimate, rounded up
    to 0.1%); the upper bound beside it says how rough the estimate is."""
    try:
        ruleset = load_rules(rules)
        samples = [open_samples(r, db) for r in runs]
        for s in samples[1:]:
            diffs = compare_runs(samples[0], s).differences
            if diffs and not allow_different_workloads:
                raise ValueError(f"runs {samples[0].run.run_id} and {s.run.run_id} ran different workloads "
                                 f"({'; '.join(diffs)}): A/A runs must repeat one workload "
                                 "(--allow-different-workloads to measure anyway)")
        rng = np.random.default_rng(ruleset.settings.seed)
        rows = [measure_noise(r, samples, ruleset.settings, rng) for r in ruleset.rules]
        source = rules.read_text(encoding="utf-8") if rules is not None else None
        written = write_run_noise(source, [r.run_noise for r in rows], len(samples))
        if write is not None:
            write.write_text(written.text, encoding="utf-8")
    except (ValueError, StoreError, OSError) as exc:
        raise fail(str(exc)) from None
    if json_out:
        sys.stdout.write(json.dumps({"runs": [s.run.run_id for s in samples],
                                     "confidence": ruleset.settings.confidence,
                                     "rules": [{**r.as_dict(), "written": w} for r, w in zip(rows, written.per_rule, strict=True)],
                                     "gate_run_noise_written": written.gate, "toml": written.text}, indent=2) + "\n")
        return
    t = Table(title=f"run-to-run noise over {len(samples)} runs (sd of one run; "
                    f"{ruleset.settings.confidence:.0%} upper bound)", title_justify="left")
    for c in ("rule", "between runs", "sampling", "run_noise", "upper bound"):
        t.add_column(c, justify="left" if c == "rule" else "right")

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.2%}"

    for r, w in zip(rows, written.per_rule, strict=True):
        t.add_row(Text(r.rule), pct(r.between), pct(r.within), w or "not measured", pct(r.upper))
    console = make_console()
    console.print(t)
    for r in rows:
        if r.note:
            console.print(f"  {r.rule}: {r.note}", highlight=False, markup=False)
    if written.gate is not None:
        console.print(f"[gate] run_noise = {written.gate} (the largest: for rules without their own)",
                      highlight=False, markup=False)
    where = f"written to {write}" if write is not None else "not written (pass --write FILE)"
    console.print(f"rules with these run_noise values: {where}", highlight=False, markup=False)
    if write is None:
        console.print(written.text, highlight=False, markup=False)


def compare(
    run_a: str = typer.Argument(..., help="First run (id/prefix/'last', or FILE\\[@RUN])."),
    run_b: str = typer.Argument(..., help="Second run."),
    db: Path = DB_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print both summaries side by side as JSON."),
) -> None:
    """Side-by-side table of two runs' summaries, with the relative change."""
    try:
        a, b = open_samples(run_a, db), open_samples(run_b, db)
    except StoreError as exc:
        raise fail(str(exc)) from None
    sa, sb = a.run.summary or {}, b.run.summary or {}
    keys = ["completed", "failed", "duration", "request_throughput", "output_throughput"]
    for m in ("ttft", "tpot", "itl", "e2el"):
        keys += [f"mean_{m}_ms", f"p50_{m}_ms", f"p99_{m}_ms"]
    if "request_goodput" in sa or "request_goodput" in sb:
        keys.append("request_goodput")
    diffs = compare_runs(a, b).differences
    if json_out:
        sys.stdout.write(json.dumps({"a": a.run.run_id, "b": b.run.run_id, "workload_differences": diffs,
                                     "metrics": {k: {"a": sa.get(k), "b": sb.get(k)} for k in keys}},
                                    indent=2, default=str) + "\n")
        return
    t = Table(title=f"{a.run.run_id} vs {b.run.run_id}", title_justify="left")
    for c in ("metric", "A", "B", "B vs A"):
        t.add_column(c, justify="left" if c == "metric" else "right")
    for k in keys:
        va, vb = sa.get(k), sb.get(k)
        rel = f"{vb / va - 1:+.1%}" if isinstance(va, int | float) and isinstance(vb, int | float) and va else "-"
        t.add_row(k, "-" if va is None else f"{va:,.4g}", "-" if vb is None else f"{vb:,.4g}", rel)
    console = make_console()
    console.print(t)
    console.print("[dim]single numbers, no intervals: use `infbench gate` for a verdict[/]")
    for d in diffs:
        print_warning(f"workloads differ: {d}", console)
