"""The `infbench` examples of the README, and the examples in `--help` texts, run as written
(how: tests/e2e/docs_runner.py). Each guide's examples run in its own file,
tests/e2e/test_docs_guide_*.py; this one also checks that every document with examples has
one, so a new guide cannot go untested.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.docs_runner import (
    FRONT_DOOR_VERBS,
    README_VERBS,
    Command,
    Workspace,
    doc_sections,
    guide_file,
    readme_commands,
    run_section,
    section_ids,
)
from tests.support.cli import ROOT, infbench
from tests.support.docs import example_docs

pytestmark = pytest.mark.e2e

README = ROOT / "README.md"
SECTIONS = doc_sections(README)


def test_the_readme_examples_were_all_found() -> None:
    assert len(readme_commands()) >= 12, readme_commands()
    assert {args[0] for args, _ in readme_commands()} >= README_VERBS
    front = readme_commands([README])
    assert {args[0] for args, _ in front} >= FRONT_DOOR_VERBS, front
    # Every guide shows what it is about, and has the test file that runs it.
    assert all(doc_sections(doc) for doc in example_docs()), example_docs()
    missing = [d.name for d in example_docs() if d != README and not guide_file(d).exists()]
    assert not missing, f"no tests/e2e/test_docs_guide_*.py runs {missing}"


# One test per section, in the document's order and sharing its scratch directory, so each
# section has its own time limit and a failure names the section.
@pytest.mark.parametrize("title, commands", SECTIONS, ids=section_ids(README, SECTIONS))
def test_readme_section_runs_as_written(docs_workspaces: dict[Path, Workspace], docs_server: str,
                                        tmp_path_factory: pytest.TempPathFactory, title: str,
                                        commands: list[Command]) -> None:
    run_section(docs_workspaces, docs_server, tmp_path_factory, README, commands)


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
