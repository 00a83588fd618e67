"""How `infbench plan` prints: the names it resolved, then its tables, or all of it as JSON.

Every output starts by saying which model and GPU it is for, and what a name the user typed
resolved to when that is not literally the name (`llama-3.1-70b` -> the catalog's
Llama-3.3-70B-Instruct, and why). Text from the user or a config file is printed literally:
no rich markup or emoji codes are applied to it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from infbench.commands.plan.inputs import Target
from infbench.commands.plan.rows import Block, Section
from infbench.console import make_console
from infbench.specs.names import CONFIG_FILE, Resolved

_LABELS = {"model": "model", "gpu": "gpu", "dtype": "dtype", "kv_cache_dtype": "kv-cache-dtype"}


def plain(obj: Any) -> Any:
    """A result as JSON-ready values: dataclasses as dicts, inf/nan as null."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: plain(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name != "layout"  # a derived helper, not a result
        }
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, str | int | float | bool | type(None)):
        return obj
    return getattr(obj, "name", str(obj))


def resolution_line(r: Resolved) -> str:
    label = _LABELS.get(r.kind, r.kind)
    if r.how == CONFIG_FILE:
        return f"{label}: {r.name} (config.json given)"
    text = f"{label}: {r.requested} → {r.name}" if r.renamed else f"{label}: {r.name}"
    return f"{text} ({r.note})" if r.note else text


def resolution_lines(target: Target) -> list[str]:
    names = [resolution_line(r) for r in target.resolved if r.kind in ("model", "gpu")]
    formats = [resolution_line(r) for r in target.resolved if r.kind not in ("model", "gpu")]
    return names + (["; ".join(formats)] if formats else [])


def _console(min_width: int) -> Console:
    console = make_console()
    console.width = max(min_width, console.width)
    return console


def _table(section: Section) -> Table:
    table = Table(title=Text(section.title), title_justify="left")
    for i, column in enumerate(section.columns):
        table.add_column(Text(column), justify="right" if i in section.right else "left")
    for row in section.rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def show(target: Target, blocks: Sequence[Block], min_width: int = 120) -> None:
    """The resolved names, then each table or paragraph, on stdout."""
    console = _console(min_width)
    for line in resolution_lines(target):
        console.print(Text(line))
    for block in blocks:
        console.print(_table(block) if isinstance(block, Section) else Text(block))


def resolved_json(target: Target) -> dict[str, Any]:
    """{"model": {"requested", "name", "how", "note", "renamed"}, "gpu": ..., ...}"""
    return {
        r.kind: {k: v for k, v in plain(r).items() if k != "kind"} | {"renamed": r.renamed}
        for r in target.resolved
    }


def emit_json(result: Any, target: Target, **extra: Any) -> None:
    """The result's fields, any extra figures, and `resolved`: what each name resolved to."""
    data = plain(result)
    data.update(plain(extra))
    data["resolved"] = resolved_json(target)
    print(json.dumps(data, indent=2))


def emit_json_list(items: list[dict[str, Any]]) -> None:
    print(json.dumps(plain(items), indent=2))
