"""`infbench run --tenants/--adapters` with a bad spec: one line naming the part, exit 2, nothing
sent (the URL answers nothing, so a request sent would be a different error)."""

from __future__ import annotations

import pytest

from tests.support.cli import infbench

pytestmark = pytest.mark.e2e

USAGE = 2  # infbench/exit_codes.py


@pytest.mark.parametrize(("args", "names"), [
    (["--tenants", "docs"], "tenants: 'docs' is not NAME:WEIGHT"),
    (["--tenants", "docs:0"], "weight '0'"),
    (["--tenants", "docs:1:input=uniform:9:1"], "'uniform:9:1'"),
    (["--tenants", "[red]x[/red]:1"], "'[red]x[/red]'"),  # printed literally, no markup
    (["--adapters", "a=sql"], "no --tenants"),
    (["--tenants", "a:1", "--adapters", "b=sql"], "tenant 'b'"),
    (["--tenants", "a:1", "--workload", "trace", "--trace", "x.csv"], "--workload trace"),
])
def test_bad_tenant_and_adapter_specs_are_one_line_exit_2(args: list[str], names: str) -> None:
    r = infbench("run", "--url", "http://127.0.0.1:9", "--num-requests", "2", *args)
    assert r.returncode == USAGE, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], r.stderr
    assert "Traceback" not in r.stderr + r.stdout
