"""Write benchmarks/README.md from the result files in benchmarks/results/, so that no figure
in it is copied by hand: each file's title, the command that wrote it, the machine it ran on,
its headline sentences (the bold figures) and its first table, with a link to the whole file.

    python benchmarks/make_readme.py          # rewrite benchmarks/README.md
    python benchmarks/make_readme.py --check  # exit 1 when the committed file is stale

A benchmark that writes a new result file needs nothing here: rerun this script and commit
both (tests/unit/test_benchmarks_readme.py fails while they disagree).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE_ROWS = 8  # a longer table is cut here, the rest is in the file
HEADLINES = 3

INTRO = """# Benchmarks

Every performance claim infbench makes is measured by a script in this folder, which writes
its results, with the machine it ran on, to `results/`. This page is generated from those
files by `python benchmarks/make_readme.py` (do not edit it by hand; a test checks that it
matches the files): for each, its command, its machine, its headline figures and its first
table. Most were measured on a shared 2-vCPU VM with no GPU, where the server and the client
share the CPUs and other work ran beside them: read each figure with its machine line.
"""


def _first(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text, flags=re.M)
    return m.group(1).strip() if m else None


def _writer(stem: str, scripts: dict[str, str]) -> str | None:
    """The script that names this result file, when the file does not say its command."""
    names = sorted(name for name, src in scripts.items() if f"{stem}.md" in src)
    return f"python benchmarks/{names[0]}" if names else None


def _first_table(text: str) -> tuple[list[str], int]:
    """The first Markdown table's lines (header, rule, up to TABLE_ROWS rows) and the rows left."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("|")), None)
    if start is None:
        return [], 0
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    rows = lines[start:end]
    return rows[:2 + TABLE_ROWS], max(0, len(rows) - 2 - TABLE_ROWS)


def _headlines(text: str) -> list[str]:
    """Sentences that carry a bold figure, outside tables: what the file itself stresses."""
    out = []
    for line in text.splitlines():
        if "**" in line and not line.startswith("|"):
            out.append(line.strip())
    return out[:HEADLINES]


@dataclass(frozen=True)
class Result:
    """What the page shows of one result file."""

    name: str
    title: str
    command: str | None
    machine: str | None
    date: str | None
    headlines: list[str]
    table: list[str]
    more_rows: int


def summarize(path: Path, scripts: dict[str, str]) -> Result:
    text = path.read_text(encoding="utf-8")
    table, more = _first_table(text)
    return Result(path.name, _first(r"^# (.+)$", text) or path.stem, _command(text, path, scripts),
                  _first(r"^Machine: (.+)$", text),
                  _first(r"^Date: (.+)$", text) or _first(r"^Command: `[^`]+` · (.+)$", text),
                  _headlines(text), table, more)


def _command(text: str, path: Path, scripts: dict[str, str]) -> str | None:
    """`Command: `...``, else a command in a code block under `Command:`, else the first
    `python benchmarks/...` the file names, else the script that writes the file."""
    block = re.search(r"^Command:\s*\n+```\w*\n(.*?)```", text, flags=re.M | re.S)
    if block:
        return " ".join(block.group(1).replace("\\\n", " ").split())
    return (_first(r"^Command: `([^`]+)`", text)
            or _first(r"`(python benchmarks/[^`]+)`", text) or _writer(path.stem, scripts))


def render(results: Path, scripts_dir: Path) -> str:
    scripts = {p.name: p.read_text(encoding="utf-8") for p in sorted(scripts_dir.glob("*.py"))}
    files = [summarize(p, scripts) for p in sorted(results.glob("*.md"))]
    out = [INTRO, "| result | command | date |", "| --- | --- | --- |"]
    for f in files:
        command = f"`{f.command}`" if f.command else "-"
        out.append(f"| [{f.title}](results/{f.name}) | {command} | {f.date or '-'} |")
    for f in files:
        out += ["", f"## {f.title}", ""]
        if f.command:
            out.append(f"Command: `{f.command}`  ")
        out.append(f"Machine: {f.machine or 'not recorded'}  ")
        out.append(f"Full results: [results/{f.name}](results/{f.name})")
        for line in f.headlines:
            out += ["", line]
        if f.table:
            out += ["", *f.table]
            if f.more_rows:
                out += ["", f"({f.more_rows} more rows in the file)"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md is stale")
    args = ap.parse_args(argv)
    text = render(HERE / "results", HERE)
    target = HERE / "README.md"
    if args.check:
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            print(f"{target} is stale: run python benchmarks/make_readme.py", file=sys.stderr)
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
