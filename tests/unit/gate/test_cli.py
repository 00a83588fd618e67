"""`infbench gate` usage errors: one line on stderr naming what is wrong, exit code 2; and
the report texts print one change with one sign convention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infbench.gate.report import change_text, gate_document, to_junit, to_markdown
from infbench.gate.rules import load_rules
from infbench.gate.verdict import run_gate
from tests.support.cli import infbench
from tests.support.gate_runs import Machine, make_workload, simulate
from tests.support.stores import new_store


@pytest.mark.parametrize(("args", "message"), [
    (["--candidate", "last"], "baseline: required"),
    (["--baseline", "a", "--candidate", "b", "--inconclusive", "maybe"], "inconclusive: 'maybe' is not pass or fail"),
    (["--baseline", "a", "--candidate", "b", "--rules", "no-such-rules.toml"], "does not exist"),
    (["--baseline", "nosuchrun", "--candidate", "last"], "nosuchrun"),
    (["noise", "a", "b", "c", "--rules", "no-such-rules.toml"], "does not exist"),
])
def test_usage_errors_are_one_line_with_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    db = tmp_path / "empty.duckdb"
    new_store(db).close()  # a store with no runs
    r = infbench("gate", "--db", str(db), *args) if args[0] != "noise" else \
        infbench("gate", "noise", *args[1:], "--db", str(db))
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert message in err and "\n" not in err and "Traceback" not in err, err


def test_reports_print_the_same_change_everywhere() -> None:
    w = make_workload(600, 4)
    base, slow = simulate(w, Machine(drift=0.0), 1), simulate(w, Machine(drift=0.0), 2, decode=1.2)
    out = run_gate(base, slow, load_rules(None))
    doc = gate_document(out.verdict, out.results, {
        "baseline": "b", "candidate": "c", "baseline_requests": 600, "candidate_requests": 600,
        "paired": out.paired, "paired_requests": out.paired_requests, "confidence": 0.95, "warnings": []})
    md, xml = to_markdown(doc, out.results), to_junit(doc, out.results, True)
    assert "requests paired one to one (600 pairs)" in md
    for r in out.results:
        text = change_text(r)
        lo, hi = (f"{v:+.1%}" for v in r.ci)
        assert text.startswith(f"{r.change:+.1%} [{lo}, {hi}]")
        assert text in md and text in xml and f"{lo} .. {hi}" in r.reason
    thr = next(r for r in out.results if r.metric == "output_tokens")
    assert thr.change < 0 and "| >= -5.0% |" in md and np.isfinite(thr.ci).all()
