"""Writing measured run_noise into a rules file, keeping everything else in it.

The file is edited through tomlkit, which round-trips TOML: comments, order, spacing and
every other field stay as the user wrote them; only the `run_noise` values change. Without a
rules file, the built-in rules are written out as a new file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tomlkit
from tomlkit.items import Item

from infbench.gate.rules import DEFAULT_RULES


@dataclass(frozen=True)
class Written:
    per_rule: list[str | None]  # the value written into each [[rule]] (None: left alone)
    gate: str | None  # the value written into [gate] (None: left alone)
    text: str


def percent(v: float) -> str:
    """A run_noise as the file holds it: rounded *up* to 0.1%, so a measured 1.23% is
    written 1.3% and never understates the measurement."""
    return f"{math.ceil(v * 1000 - 1e-9) / 10:.1f}%"


def _set(table: tomlkit.items.Table, value: str, comment: str) -> None:
    old = table.get("run_noise")
    item = tomlkit.string(value)
    # a comment the user wrote beside run_noise stays; otherwise say where the value came from
    kept = old.trivia.comment.lstrip("# ").strip() if isinstance(old, Item) and old.trivia.comment else ""
    item.comment(kept or comment)
    table["run_noise"] = item


def _default_document() -> tomlkit.TOMLDocument:
    doc = tomlkit.document()
    doc.add(tomlkit.comment("infbench gate rules: the built-in rules, with run_noise measured by `infbench gate noise`"))
    doc.add("gate", tomlkit.table())
    rules = tomlkit.aot()
    for raw in DEFAULT_RULES:
        t = tomlkit.table()
        for k, v in raw.items():
            t[k] = v
        rules.append(t)
    doc.add("rule", rules)
    return doc


def write_run_noise(source: str | None, measured: list[float | None], runs: int) -> Written:
    """`source` (a rules file's text, or None for the built-in rules) with each rule's
    measured run_noise (None: not measured, left as it was) and [gate] run_noise set to the
    largest measured, for rules that have none of their own."""
    doc = tomlkit.parse(source) if source is not None else _default_document()
    if "rule" not in doc or len(doc["rule"]) != len(measured):
        raise ValueError("rules: the file's [[rule]] tables do not match the rules measured")
    per_rule: list[str | None] = []
    for table, value in zip(doc["rule"], measured, strict=True):
        if value is None:
            per_rule.append(None)
            continue
        per_rule.append(percent(value))
        _set(table, percent(value), f"measured from {runs} runs")
    values = [v for v in measured if v is not None]
    gate = percent(max(values)) if values else None
    if gate is not None:
        if "gate" not in doc:
            doc.add("gate", tomlkit.table())
        _set(doc["gate"], gate, "the largest measured: for rules without their own")
    return Written(per_rule, gate, tomlkit.dumps(doc))
