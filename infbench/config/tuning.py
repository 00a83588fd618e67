"""The kernel tuning tables a server log says it found, did not find, or replaced by another
tuned table (`infbench.specs.tuning` reads the lines), as three settings of the capture:
`kernel_tables_missing`, `kernel_tables_found`, `kernel_tables_other_triton`, each the sorted
table file names. They are what the engine resolved at start-up (origin `resolved`), so
`config diff` of an H100 and an H200 capture shows a table one side found and the other
did not, and `diagnose config` judges them (playbooks/tuning_tables.py)."""

from __future__ import annotations

from infbench.config.model import Setting
from infbench.specs.tuning import needs_continuation, read_tuning_lines

KEYS = {"missing": "kernel_tables_missing", "found": "kernel_tables_found",
        "fallback": "kernel_tables_other_triton"}


def tuning_settings(lines: list[str], numbers: list[int] | None = None) -> list[Setting]:
    """One setting per outcome the log's lines show; a line broken inside a table's file
    name is read with the line after it."""
    found: dict[str, tuple[set[str], int]] = {}
    for i, line in enumerate(lines):
        text = line
        if needs_continuation(text) and i + 1 < len(lines):
            text += lines[i + 1]
        for t in read_tuning_lines(text):
            number = numbers[i] if numbers else i + 1
            names, first = found.get(t.outcome, (set(), number))
            names.add(t.table.file)
            found[t.outcome] = (names, min(first, number))
    return [Setting(KEYS[outcome], sorted(names), "resolved", "log line", first)
            for outcome, (names, first) in sorted(found.items())]
