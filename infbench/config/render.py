"""A diff as text for a terminal, as Markdown for a pull request or an incident, as JSON."""

from __future__ import annotations

import json
from typing import Any

from infbench.config.diff import Difference, DiffResult

_SIDE = {"a": "A", "b": "B"}


def _v(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(meta: dict[str, Any]) -> str:
    label = meta.get("label") or meta.get("config_id") or "?"
    return f"{label} ({meta.get('engine')} {meta.get('version') or 'version unknown'})"


def _impact(d: Difference) -> str:
    worse = f"worse on {_SIDE[d.worse]}" if d.worse else "direction unknown" if not d.priced else "no change for this workload"
    return f"{', '.join(d.metrics) or '-'}; {worse}"


def to_text(r: DiffResult, top: int = 15) -> str:
    lines = [f"A: {_name(r.a)}", f"B: {_name(r.b)}",
             f"workload: {r.workload.describe()}"
             + (f", {r.workload.model} on {r.workload.gpu}" if r.workload.model and r.workload.gpu else ""),
             f"{len(r.differences)} settings differ, {r.same} agree; ranked by expected impact:", ""]
    shown = r.differences[:top]
    for i, d in enumerate(shown, start=1):
        lines.append(f"{i:>2}. {d.key}: {_v(d.a)} -> {_v(d.b)}   [score {d.score:.2f}; {_impact(d)}]")
        lines.append(f"    why it matters: {d.reason}")
        lines.append(f"    why it differs: {d.why_different}")
    rest = len(r.differences) - len(shown)
    if rest > 0:
        lines.append(f"... {rest} more with lower expected impact (--top N, --json or --markdown list all)")
    if r.identity:
        lines.append("served: " + "; ".join(f"{d.key} {_v(d.a)} -> {_v(d.b)}" for d in r.identity))
    return "\n".join(lines) + "\n"


def to_markdown(r: DiffResult) -> str:
    out = [f"## infbench config diff: {_name(r.a)} vs {_name(r.b)}", "",
           f"Workload: {r.workload.describe()}. {len(r.differences)} settings differ, {r.same} agree. "
           "Ranked by expected impact on this workload.", "",
           "| # | setting | A | B | score | moves | why it matters | why it differs |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, d in enumerate(r.differences, start=1):
        cells = [str(i), f"`{d.key}`", f"`{_v(d.a)}`", f"`{_v(d.b)}`", f"{d.score:.2f}", _impact(d),
                 d.reason, d.why_different]
        out.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    if r.identity:
        out += ["", "Served model: " + "; ".join(f"`{d.key}` `{_v(d.a)}` -> `{_v(d.b)}`" for d in r.identity)]
    return "\n".join(out) + "\n"


def to_json(r: DiffResult) -> str:
    return json.dumps(r.as_dict(), indent=2, default=str) + "\n"
