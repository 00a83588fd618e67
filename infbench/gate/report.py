"""Gate results for people and for CI: Markdown (a pull-request comment), JUnit XML (test
reporters), JSON (scripts); the terminal table uses the same texts. Every change and interval
is candidate against baseline, signed the same way everywhere, beside the limit it must stay
within (`<= +5.0%` when lower is better, `>= -5.0%` when higher is better)."""

from __future__ import annotations

import json
from typing import Any
from xml.etree import ElementTree as ET

from infbench.gate.evaluate import FAIL, INCONCLUSIVE, PASS, RuleResult
from infbench.gate.rules import format_change

_ICON = {PASS: "✅ pass", FAIL: "❌ fail", INCONCLUSIVE: "⚠️ inconclusive"}


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    return f"{v:,.3g} {unit}" if abs(v) < 1e4 else f"{v:,.0f} {unit}"


def change_text(r: RuleResult) -> str:
    """`+1.2% [-0.4%, +2.9%]`: the change and its interval."""
    if r.change is None or r.ci is None:
        return "–"
    c, lo, hi = (format_change(v, r.relative, r.unit) for v in (r.change, *r.ci))
    return f"{c} [{lo}, {hi}]"


def pairing_text(doc: dict[str, Any]) -> str:
    runs = len(doc.get("baseline_runs", ())) + len(doc.get("candidate_runs", ()))
    if runs > 2:
        return (f"{len(doc['baseline_runs'])} baseline and {len(doc['candidate_runs'])} candidate runs, "
                "each run one observation")
    if doc.get("paired"):
        return f"requests paired one to one ({doc['paired_requests']} pairs)"
    return "requests not paired"


def gate_document(verdict: str, results: list[RuleResult], meta: dict[str, Any]) -> dict[str, Any]:
    return {"verdict": verdict, **meta, "rules": [r.as_dict() for r in results]}


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str) + "\n"


def to_markdown(doc: dict[str, Any], results: list[RuleResult]) -> str:
    conf = doc.get("confidence", 0.95)
    lines = [
        f"### infbench gate: {_ICON[doc['verdict']]}",
        "",
        f"baseline `{doc['baseline']}` ({doc['baseline_requests']} requests) vs candidate "
        f"`{doc['candidate']}` ({doc['candidate_requests']} requests), {pairing_text(doc)}; "
        f"{conf:.0%} intervals of the change, candidate vs baseline.",
        "",
        "| rule | baseline | candidate | change [CI] | limit | verdict |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        better = "↓" if r.direction == "lower" else "↑"
        lines.append(f"| {r.rule} ({better} better) | {_num(r.baseline, r.unit)} | "
                     f"{_num(r.candidate, r.unit)} | {change_text(r)} | {r.tolerance} | {_ICON[r.verdict]} |")
    notes = [f"- **{r.rule}**: {r.reason}" for r in results if r.verdict != PASS]
    notes += [f"- {r.rule}: {r.estimator}" for r in results if r.estimator]
    notes += [f"- {r.rule}: the runs' own spread is {r.run_spread:.1%} per run" for r in results
              if r.run_spread is not None]
    if notes:
        lines += ["", *notes]
    for w in doc.get("warnings", []):
        lines.append(f"- ⚠️ {w}")
    return "\n".join(lines) + "\n"


def to_junit(doc: dict[str, Any], results: list[RuleResult], inconclusive_fails: bool) -> str:
    """One test case per rule; an inconclusive rule is a failure or a skip, as configured."""
    suite = ET.Element("testsuite", name="infbench gate", tests=str(len(results)),
                       failures=str(sum(r.verdict == FAIL or (r.verdict == INCONCLUSIVE and inconclusive_fails)
                                        for r in results)),
                       skipped=str(sum(r.verdict == INCONCLUSIVE and not inconclusive_fails for r in results)),
                       errors="0")
    props = ET.SubElement(suite, "properties")
    for key in ("baseline", "candidate", "verdict"):
        ET.SubElement(props, "property", name=key, value=str(doc[key]))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname="infbench.gate", name=r.rule)
        text = (f"baseline {_num(r.baseline, r.unit)}, candidate {_num(r.candidate, r.unit)}, "
                f"change {change_text(r)}, limit {r.tolerance}: {r.reason}")
        if r.verdict == FAIL:
            ET.SubElement(case, "failure", message=r.reason, type="regression").text = text
        elif r.verdict == INCONCLUSIVE:
            tag = "failure" if inconclusive_fails else "skipped"
            ET.SubElement(case, tag, message=f"inconclusive: {r.reason}", type="inconclusive").text = text
        else:
            ET.SubElement(case, "system-out").text = text
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
