"""The `infbench` examples of docs/guides/ci-gates.md, run as written, section by section in the guide's order
(how: tests/e2e/docs_runner.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.docs_runner import (
    Command,
    Workspace,
    doc_sections,
    run_section,
    section_ids,
)
from tests.support.cli import ROOT

pytestmark = pytest.mark.e2e

DOC = ROOT / "docs/guides/ci-gates.md"
SECTIONS = doc_sections(DOC)


@pytest.mark.parametrize("title, commands", SECTIONS, ids=section_ids(DOC, SECTIONS))
def test_section_runs_as_written(docs_workspaces: dict[Path, Workspace], docs_server: str,
                                 tmp_path_factory: pytest.TempPathFactory, title: str,
                                 commands: list[Command]) -> None:
    run_section(docs_workspaces, docs_server, tmp_path_factory, DOC, commands)
