"""A diff as text for a terminal, as Markdown for a pull request or an incident, as JSON.

Every rendering keeps the same split: ranked differences (settings both sides show), values
printed at start-up against the resolved ones (which is final), and settings only one side
shows (coverage gaps, never ranked or counted as differences).
"""

from __future__ import annotations

import json
from typing import Any

from infbench.config.catalog import knobs
from infbench.config.coverage import Finality, Gap
from infbench.config.diff import Difference, DiffResult

_SIDE = {"a": "A", "b": "B"}


def _v(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(meta: dict[str, Any]) -> str:
    label = meta.get("label") or meta.get("config_id") or "?"
    kind = f" from {meta['source_kind']}" if meta.get("source_kind") else ""
    return f"{label} ({meta.get('engine')} {meta.get('version') or 'version unknown'}){kind}"


def _impact(d: Difference) -> str:
    worse = f"worse on {_SIDE[d.worse]}" if d.worse else "direction unknown" if not d.priced else "no change for this workload"
    return f"{', '.join(d.metrics) or '-'}; {worse}"


def _counts(r: DiffResult) -> str:
    return (f"{len(r.differences)} settings differ, {r.same} agree; shown by only one side: "
            f"{len(r.gaps)} (A {len(r.only('a'))}, B {len(r.only('b'))})"
            + (f"; printed vs resolved: {len(r.finality)}" if r.finality else "")
            + (f"; no effect on speed: {len(r.inert)}" if r.inert else ""))


def _nothing(r: DiffResult) -> str:
    if r.inert:
        return "nothing ranked: the settings that differ have no effect on serving speed."
    return "nothing ranked: every setting both sides show agrees."


def _final(f: Finality) -> str:
    p, q = _SIDE[f.printed_side], _SIDE[f.final_side]
    return (f"{f.key}: {p} printed {_v(f.printed)} ({f.printed_origin}), {q} resolved {_v(f.final)}; "
            f"final: {_v(f.final)} ({q}). {f.evidence}")


def _gap(g: Gap) -> str:
    return f"{g.key} {_v(g.value)} ({g.origin})" + (f"; other side: {g.context}" if g.context else "")


def _grouped(gaps: list[Gap]) -> tuple[list[Gap], str]:
    """Catalog knobs one by one; the rest by their top-level name, so a whole config block the
    other side never shows reads as one entry."""
    catalog = knobs()
    known = [g for g in gaps if g.key in catalog]
    groups: dict[str, list[Gap]] = {}
    for g in gaps:
        if g.key not in catalog:
            groups.setdefault(g.key.split(".", 1)[0], []).append(g)
    words = [f"{p}.* ({len(gs)})" if len(gs) > 1 or "." in gs[0].key else f"{p} {_v(gs[0].value)}"
             for p, gs in groups.items()]
    return known, ", ".join(words)


def _superseded_lines(r: DiffResult) -> list[str]:
    return [f"{_SIDE[n]} printed then resolved: {s['key']} {_v(s['printed'])} ({s['printed_origin']}"
            f"{', line ' + str(s['printed_line']) if s['printed_line'] else ''}) -> {_v(s['final'])} (final)"
            for n, rows in sorted(r.superseded.items()) for s in rows]


def to_text(r: DiffResult, top: int = 15) -> str:
    lines = [f"A: {_name(r.a)}", f"B: {_name(r.b)}",
             f"workload: {r.workload.describe()}"
             + (f", {r.workload.model} on {r.workload.gpu}" if r.workload.model and r.workload.gpu else ""),
             _counts(r) + (";" if r.differences else ""),
             "ranked by expected impact:" if r.differences else
             _nothing(r), ""]
    shown = r.differences[:top]
    for i, d in enumerate(shown, start=1):
        lines.append(f"{i:>2}. {d.key}: {_v(d.a)} -> {_v(d.b)}   [score {d.score:.2f}; {_impact(d)}]")
        lines.append(f"    why it matters: {d.reason}")
        lines.append(f"    why it differs: {d.why_different}")
    rest = len(r.differences) - len(shown)
    if rest > 0:
        lines.append(f"... {rest} more with lower expected impact (--top N, --json or --markdown list all)")
    if r.finality:
        lines.append(f"printed at start-up, resolved later (not a change; the resolved value is final): "
                     f"{len(r.finality)}")
        lines += [f"  {_final(f)}" for f in r.finality]
    lines += _superseded_lines(r)
    if r.gaps:
        lines.append(f"shown by only one side (coverage gaps: not compared, not ranked): {len(r.gaps)}")
        for side in ("a", "b"):
            gaps = r.only(side)
            if not gaps:
                continue
            meta = r.a if side == "a" else r.b
            lines.append(f"  only {_SIDE[side]} ({meta.get('label') or meta.get('config_id') or '?'}): {len(gaps)}")
            known, others = _grouped(gaps)
            lines += [f"    {_gap(g)}" for g in known]
            if others:
                lines.append(f"    other settings: {others}")
    if r.unobserved_moves:
        lines.append("catalog defaults that moved between the versions, shown by neither side (not observed): "
                     + "; ".join(f"{m['key']} {m['a']} -> {m['b']} ({m['source']})" for m in r.unobserved_moves))
    if r.identity:
        lines.append("served: " + "; ".join(f"{d.key} {_v(d.a)} -> {_v(d.b)}" for d in r.identity))
    if r.inert:
        lines.append("no effect on speed (not ranked): " + "; ".join(f"{d.key} {_v(d.a)} -> {_v(d.b)}" for d in r.inert))
    return "\n".join(lines) + "\n"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def to_markdown(r: DiffResult) -> str:
    out = [f"## infbench config diff: {_name(r.a)} vs {_name(r.b)}", "",
           f"Workload: {r.workload.describe()}. {_counts(r)}. "
           + ("Ranked by expected impact on this workload." if r.differences
              else _nothing(r).capitalize()), "",
           "| # | setting | A | B | score | moves | why it matters | why it differs |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, d in enumerate(r.differences, start=1):
        out.append(_row([str(i), f"`{d.key}`", f"`{_v(d.a)}`", f"`{_v(d.b)}`", f"{d.score:.2f}", _impact(d),
                         d.reason, d.why_different]))
    if r.finality or r.superseded:
        out += ["", "### Printed at start-up, resolved later (the resolved value is final; not a change)", ""]
        out += [f"- `{f.key}`: {_final(f)}" for f in r.finality]
        out += [f"- {line}" for line in _superseded_lines(r)]
    if r.gaps:
        out += ["", f"### Shown by only one side (coverage gaps, not ranked): {len(r.gaps)}", ""]
        for side in ("a", "b"):
            out += [f"- only {_SIDE[side]}: `{g.key}` `{_v(g.value)}` ({g.origin})"
                    + (f"; other side: {g.context}" if g.context else "") for g in r.only(side)]
    if r.unobserved_moves:
        out += ["", "Catalog defaults that moved between the versions, shown by neither side (not observed): "
                + "; ".join(f"`{m['key']}` {m['a']} -> {m['b']} ({m['source']})" for m in r.unobserved_moves)]
    if r.identity:
        out += ["", "Served model: " + "; ".join(f"`{d.key}` `{_v(d.a)}` -> `{_v(d.b)}`" for d in r.identity)]
    if r.inert:
        out += ["", "No effect on speed (not ranked): " + "; ".join(f"`{d.key}` `{_v(d.a)}` -> `{_v(d.b)}`"
                                                                    for d in r.inert)]
    return "\n".join(out) + "\n"


def to_json(r: DiffResult) -> str:
    return json.dumps(r.as_dict(), indent=2, default=str) + "\n"
