"""The documents whose examples are code: the README (the front door) and one guide per job
in `docs/guides/`. Tests that run or read examples take them from here, so an example that
moves from the README into a guide stays tested."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs" / "guides"


def example_docs() -> list[Path]:
    """The README, then every guide (by name): each is read, and its examples run, in order."""
    return [ROOT / "README.md", *sorted(GUIDES.glob("*.md"))]


def section(title: str) -> str:
    """The text of the one `## title` section among the example documents."""
    found = [chunk.split("\n## ", 1)[0] for doc in example_docs()
             for chunk in doc.read_text(encoding="utf-8").split(f"## {title}\n")[1:]]
    assert len(found) == 1, f"{len(found)} sections titled {title!r} in {example_docs()}"
    return found[0]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)
