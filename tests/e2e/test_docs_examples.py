"""The README's `infbench` examples and the examples in `--help` texts, run as written.

Examples are code: a user pastes them. Each README command runs in a scratch directory,
against the known-schedule mock server where the example names `http://127.0.0.1:8000`
(loopback only), with the placeholders a reader would fill in (`BASE_RUN`, `A1`, `RUN_A`...)
replaced by runs the earlier examples made. Two bounds are added so the suite stays short:
`infbench run` against a URL gets `--duration 3`, and `infbench sweep` gets short points and a
low concurrency cap; the bundled-engine main job (`infbench run`) runs exactly as written.
An example's expected exit code is 0 unless its comment says otherwise ("exits 1", "exit 0
pass, 1 fail").
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import duckdb
import pytest

from tests.support.cli import ROOT, infbench
from tests.support.process import sse_server

pytestmark = pytest.mark.e2e

PLACEHOLDER_RUNS = ("BASE_RUN", "RUN_A", "RUN_B", "A1", "A2", "A3")


def readme_commands() -> list[tuple[list[str], set[int]]]:
    """Every `infbench ...` command in the README's bash blocks, with its allowed exit codes."""
    text = (ROOT / "README.md").read_text()
    out: list[tuple[list[str], set[int]]] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            code, _, comment = line.partition("#")
            codes = {0}
            if "exits 1" in comment:
                codes = {1}
            elif "1 fail" in comment:
                codes = {0, 1}
            for part in re.split(r";|&&", code):
                words = shlex.split(part)
                if words and words[0] == "infbench":
                    out.append((words[1:], codes))
    return out


def _bounded(args: list[str]) -> list[str]:
    if args[0] == "run" and "--url" in args and "--duration" not in args:
        return [*args, "--duration", "3"]
    if args[0] == "sweep":
        return [*args, "--duration", "1.5", "--max-concurrency", "4", "--num-rates", "1"]
    return args


def test_readme_examples_run_as_written(tmp_path: Path) -> None:
    commands = readme_commands()
    assert len(commands) >= 12, commands  # the README's examples were all found
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    ran: list[str] = []
    fill: dict[str, str] = {}
    with sse_server("--ttft-ms", "3", "--itl-ms", "1") as url:
        for args, codes in commands:
            args = [a.replace("http://127.0.0.1:8000", url) for a in _bounded(args)]
            if any(a in PLACEHOLDER_RUNS for a in args):
                args = [fill.get(a, a) for a in args] if fill else args
                if not fill:
                    fill.update(_placeholders(tmp_path, url))
                    args = [fill.get(a, a) for a in args]
            if args[:2] == ["gate", "noise"] and not (tmp_path / "gates.toml").exists():
                (tmp_path / "gates.toml").write_text((ROOT / "examples/ci/gates.toml").read_text())
            r = infbench(*args, cwd=tmp_path, timeout=300)
            assert r.returncode in codes, (args, r.returncode, r.stderr[-2000:])
            assert "Traceback" not in r.stderr, (args, r.stderr)
            ran.append(args[0])
    assert {"run", "runs", "show", "report", "export", "import", "plan", "gate", "compare",
            "sweep"} <= set(ran)


def _placeholders(cwd: Path, url: str) -> dict[str, str]:
    """Runs a reader would name: a baseline and repeats of the same workload as the last run
    (the gate refuses different workloads), made with the README's own run example."""
    def same_as_last() -> list[str]:
        con = duckdb.connect(str(cwd / "infbench.duckdb"), read_only=True)
        try:
            return [r[0] for r in con.execute(
                "SELECT run_id FROM runs WHERE status = 'completed' AND workload_fingerprint = "
                "(SELECT workload_fingerprint FROM runs ORDER BY created_at DESC LIMIT 1) "
                "ORDER BY created_at").fetchall()]
        finally:
            con.close()

    while len(ids := same_as_last()) < 4:
        r = infbench("run", "--url", url, "--seed", "7", "--reuse-prompts", "--duration", "3",
                     cwd=cwd)
        assert r.returncode == 0, r.stderr
    return {"BASE_RUN": ids[0], "RUN_A": ids[0], "RUN_B": ids[1],
            "A1": ids[1], "A2": ids[2], "A3": ids[3]}


HELP_EXAMPLES = [
    # (command, option, the value its help text gives as an example)
    ("run", "--slo", "ttft=500ms,tpot=50ms,e2el=5s"),
    ("sweep", "--slo", "ttft=500ms,tpot=50ms"),
    ("sweep", "--points", "1,2,4,8"),
]


@pytest.mark.parametrize(("command", "option", "value"), HELP_EXAMPLES)
def test_help_text_examples_are_accepted(command: str, option: str, value: str,
                                         tmp_path: Path) -> None:
    # The example must appear in the help, and be accepted: the command gets past validating
    # its options and stops only at the unreachable target.
    shown = infbench(command, "--help", cwd=tmp_path, COLUMNS="300").stdout
    assert f"e.g. {value}" in re.sub(r"\s+", " ", shown), shown
    extra = ["--mode", "concurrency"] if option == "--points" else []
    r = infbench(command, "--url", "http://127.0.0.1:1", option, value, *extra,
                 "--db", str(tmp_path / "x.duckdb"), cwd=tmp_path)
    assert r.returncode == 2 and "cannot reach http://127.0.0.1:1" in r.stderr, r.stderr
