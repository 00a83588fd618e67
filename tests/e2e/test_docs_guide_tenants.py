"""The `infbench` examples of docs/guides/tenants.md, run as written, section by section in the guide's order
(how: tests/e2e/docs_runner.py; a file per guide so the guides run side by side), then its Python example in
the same scratch directory, on the store the sections filled."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import duckdb
import pytest

from playbooks.tenants.playbook import MIN_OVER, Z_OVER
from tests.e2e.docs_runner import guide_test
from tests.support.cli import ROOT, cli_env

GUIDE = ROOT / "docs/guides/tenants.md"
test_section_runs_as_written = guide_test("docs/guides/tenants.md")


@pytest.mark.e2e
def test_the_python_example_runs_as_written(docs_workspaces: dict) -> None:
    workspace = docs_workspaces.get(GUIDE)
    assert workspace is not None, "the guide's sections run first (same file, in order)"
    code = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert len(code) == 1
    r = subprocess.run([sys.executable, "-c", code[0]], cwd=workspace.cwd, env=cli_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    # the last run's two tenants, in both tables (shares per tenant; prefill and decode summed)
    for tenant in ("files", "support"):
        assert r.stdout.count(tenant) == 2, r.stdout
    for column in ("engine_share", "share_ratio", "prefill_s", "decode_s"):
        assert column in r.stdout, r.stdout


@pytest.mark.e2e
def test_the_stored_diagnoses_say_what_the_guide_says(docs_workspaces: dict) -> None:
    """The three runs' diagnoses, as the sections' commands saved them: FCFS names docs; the
    fair policy brings docs to half and files to a third (its weight), within the finding's
    margin (Z_OVER standard errors, at least MIN_OVER; see tests/e2e/test_diagnose_tenants.py),
    with no finding; the chat tenant waits less under the fair policy."""
    workspace = docs_workspaces.get(GUIDE)
    assert workspace is not None, "the guide's sections run first (same file, in order)"
    con = duckdb.connect(str(workspace.cwd / "infbench.duckdb"), read_only=True)
    try:
        runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY created_at").fetchall()]
        found = {run: [tuple(r) for r in con.execute(
            "SELECT verdict, severity FROM findings WHERE run_id = ? AND playbook = 'tenants'",
            [run]).fetchall()] for run in runs}
        context: dict[str, dict[str, Any]] = {r[0]: json.loads(r[1]) for r in con.execute(
            "SELECT run_id, context FROM diagnoses WHERE playbook = 'tenants'").fetchall()}
    finally:
        con.close()
    assert len(runs) == 3
    fcfs, fair, weighted = (context[r] for r in runs)
    assert found[runs[0]] == [("tenant_unfair_share", "critical")]
    assert found[runs[1]] == [] and found[runs[2]] == []
    for ctx, heavy, weight in ((fair, "docs", 1 / 2), (weighted, "files", 1 / 3)):
        share, entitled = ctx["contended_share"][heavy], ctx["entitled_share"][heavy]
        assert entitled == pytest.approx(weight, abs=0.01)
        assert abs(share - entitled) < max(MIN_OVER, Z_OVER * ctx["contended_share_se"][heavy]), ctx
    assert fcfs["contended_share"]["docs"] > 0.6

    def chat_wait(ctx: dict[str, Any]) -> float:
        return float(next(t["wait_p50_ms"] for t in ctx["tenants"] if t["tenant"] == "chat"))
    assert chat_wait(fcfs) > 1000 and chat_wait(fair) < chat_wait(fcfs) / 1.5
