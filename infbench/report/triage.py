"""The triage of a run (`infbench diagnose RUN`) as text: for the terminal, for an incident
ticket (Markdown), and the headline the HTML report opens with. Reads the plain dict a triage
diagnosis serialises to (as stored in `diagnoses`/`findings`), so it runs no playbook."""

from __future__ import annotations

from typing import Any

_MARK = {"critical": "CRITICAL", "warning": "warning", "info": "info"}


def _damage_text(d: dict[str, Any] | None) -> str:
    if not d or d.get("score") is None:
        return "whole run"
    parts = [f"{d[k]:.0%} {label}" for k, label in (
        ("itl_p99_share", "of p99 ITL"), ("ttft_p99_share", "of p99 TTFT"), ("lost_share", "lost"))
        if d.get(k)]
    if d.get("tail_time_added_s"):
        parts.append(f"+{d['tail_time_added_s']:.1f} s in tail gaps")
    return ", ".join(parts) or "none of the tail"


def headline(doc: dict[str, Any]) -> str:
    h = doc["context"]["headline"]
    if h.get("verdict") is None:
        return "no problem found: nothing above info"
    return f"{_MARK[h['severity']]}: {h['text']} [{h['playbook']}: {h['verdict']}]"


def _findings(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each ranked row with its finding (the stored findings are ordered by severity alone)."""
    return [(row, doc["findings"][row["finding"]]) for row in doc["context"]["ranked"]]


def to_text(doc: dict[str, Any], show_sql: bool = False) -> str:
    ctx = doc["context"]
    lines = [f"triage of run {doc['run_id']}", f"headline: {headline(doc)}", "",
             "playbooks run: " + (", ".join(f"{k} ({v})" for k, v in ctx["playbooks_run"].items()) or "none"),
             "not run: " + (", ".join(f"{k} ({v})" for k, v in ctx["playbooks_skipped"].items()) or "none")]
    if doc["findings"]:
        lines += ["", "ranked findings (damage: share of the run's p99 tail in the finding's scope):"]
    for row, f in _findings(doc):
        inc = f"  [incident {row['incident'] + 1}]" if row.get("incident") is not None else ""
        lines.append(f"{row['rank']:>2}. {_MARK[f['severity']]:<8} {row['playbook']}: {f['title']} "
                     f"({f['verdict']}, confidence {f['confidence']:.2f}; {_damage_text(row['damage'])}){inc}")
        lines.append(f"    {f['summary']}")
        for e in f["evidence"]:
            vals = ", ".join(f"{k}={v}" for k, v in list(e["values"].items())[:8])
            lines.append(f"    evidence {e['name']}: {vals}")
            if show_sql and e.get("sql"):
                lines += ["      " + ln for ln in str(e["sql"]).splitlines()]
        if f["next_actions"]:
            lines.append(f"    next: {f['next_actions'][0]}")
    for i, inc in enumerate(ctx["incidents"]):
        where = f"replica {inc['replica']}" if inc.get("replica") else \
            ", ".join(f"{lo:.1f}-{hi:.1f} s" for lo, hi in inc["windows_s"][:4])
        lines.append(f"incident {i + 1}: {' + '.join(inc['members'])} at {where}")
        if inc.get("contradiction"):
            lines.append(f"  contradiction: {inc['contradiction']}")
    gaps = ctx["missing_data"]
    if gaps:
        lines += ["", "data this run lacked:"]
        lines += [f"  - {m['source']}{' (would settle a question here)' if m['relevant'] else ''}: "
                  f"{m['question']}" for m in gaps]
    if doc.get("notes"):
        lines += ["", "notes:"] + [f"  - {n}" for n in doc["notes"]]
    if show_sql:
        lines += ["", "triage queries:"]
        for name, sql in ctx.get("evidence_sql", {}).items():
            lines.append(f"  {name}:")
            lines += ["    " + ln for ln in str(sql).splitlines()]
    return "\n".join(lines) + "\n"


def _cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: dict[str, Any]) -> str:
    """For an incident ticket: the headline, the ranked table, incidents and missing data."""
    ctx = doc["context"]
    out = [f"## infbench triage of run `{doc['run_id']}`", "", f"**{_cell(headline(doc))}**", ""]
    if doc["findings"]:
        out += ["| # | severity | playbook | finding | confidence | damage | next |",
                "| --- | --- | --- | --- | ---: | --- | --- |"]
        for row, f in _findings(doc):
            nxt = f["next_actions"][0] if f["next_actions"] else ""
            out.append(f"| {row['rank']} | {f['severity']} | {row['playbook']} | {_cell(f['title'])} "
                       f"(`{f['verdict']}`) | {f['confidence']:.2f} | {_cell(_damage_text(row['damage']))} "
                       f"| {_cell(nxt)} |")
        out += ["", "<details><summary>evidence and SQL</summary>", ""]
        for row, f in _findings(doc):
            out.append(f"**{row['rank']}. {_cell(f['title'])}**: {_cell(f['summary'])}")
            for e in f["evidence"]:
                out.append(f"- `{e['name']}`: " + ", ".join(f"{k}={_cell(v)}" for k, v in e["values"].items()))
                if e.get("sql"):
                    out += ["", "```sql", str(e["sql"]), "```", ""]
        out += ["</details>", ""]
    for i, inc in enumerate(ctx["incidents"]):
        out.append(f"- incident {i + 1}: {' + '.join(f'`{m}`' for m in inc['members'])}"
                   + (f"; **contradiction**: {_cell(inc['contradiction'])}" if inc.get("contradiction") else ""))
    if ctx["missing_data"]:
        out += ["", "Data this run lacked:", ""]
        out += [f"- `{m['source']}`{' (would settle a question here)' if m['relevant'] else ''}: {m['question']}"
                for m in ctx["missing_data"]]
    return "\n".join(out) + "\n"
