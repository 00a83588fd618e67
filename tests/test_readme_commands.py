"""The README is the front door: its two commands are the ones CI and users run (keep `.ci/run` in
step with them), it stays short and links every guide, and no link of the docs leads nowhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def test_the_readme_is_a_front_door_linking_every_guide() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 10 * 1024, f"README is {len(readme.encode())} bytes: move detail to a guide"
    links = set(re.findall(r"\]\(([^)#\s]+)", readme))
    guides = {f"docs/guides/{p.name}" for p in (ROOT / "docs/guides").glob("*.md")}
    assert guides and guides <= links, sorted(guides - links)
    assert {"docs/metrics.md", "benchmarks/README.md"} <= links


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", ["README.md", "docs/metrics.md", "docs/testing.md", "benchmarks/README.md",
                                 *(f"docs/guides/{p.name}" for p in sorted((ROOT / "docs/guides").glob("*.md")))])
def test_every_relative_link_of_the_docs_leads_somewhere(doc: str) -> None:
    path = ROOT / doc
    for target, anchor in re.findall(r"\]\(([^)#\s:]*)(?:#([^)\s]+))?\)", path.read_text()):
        dest = (path.parent / target).resolve() if target else path
        assert dest.exists(), f"{doc}: {target} does not exist"
        if anchor and dest.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), flags=re.M)}
            assert anchor in slugs, f"{doc}: no heading #{anchor} in {target or doc}"
