"""The README's two commands are the ones CI and users run: keep `.ci/run` in step with them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("Run the tests", 1)[1]
    test_cmd = _bash_blocks(section)[0]
    assert "pytest" in test_cmd
    ci_lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()
                if ln.strip() and not ln.lstrip().startswith("#")]
    assert test_cmd in ci_lines, f".ci/run does not run the README's test command: {test_cmd}"


def test_readme_points_nowhere_outside_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "../" not in readme
