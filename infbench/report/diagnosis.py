"""The "Diagnosis" section of the HTML report: the findings `infbench diagnose` stored.

The report reads the `findings` table and runs no playbook (contract: infbench.report does
not import playbooks), so writing a report is cheap and shows exactly what was diagnosed.
Static HTML only: the SQL behind each number sits in a <details> element, no script needed.
"""

from __future__ import annotations

import html
from typing import Any

import duckdb

from infbench.store.findings import StoredDiagnosis, load_diagnoses

CSS = (".finding{border-left:5px solid #888;padding:4px 12px;margin:12px 0;background:#fafafa}"
       ".finding.critical{border-color:#c00}.finding.warning{border-color:#d90}"
       ".finding.info{border-color:#08c}.sev{font-weight:bold;text-transform:uppercase;font-size:12px}"
       ".critical .sev{color:#c00}.warning .sev{color:#a60}.info .sev{color:#08c}"
       ".verdict{font-family:monospace;color:#555}.finding td{text-align:left;vertical-align:top}"
       # A query's long lines wrap inside its cell: a table sizes to its content, so an
       # overflow:auto <pre> in one would widen the page past a 900 px window when expanded.
       "details{margin:2px 0}summary{cursor:pointer;font-size:11px;color:#555}"
       ".finding details pre{white-space:pre-wrap;overflow-wrap:anywhere}"
       ".headline{font-size:18px;padding:10px 14px;margin:8px 0 16px;border-left:8px solid #2a2}"
       ".headline.critical{border-color:#c00}.headline.warning{border-color:#d90}")


def _e(value: object) -> str:
    return html.escape(str(value))


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return "-" if v is None else str(v)


def _evidence_rows(evidence: list[dict[str, Any]]) -> str:
    rows = []
    for e in evidence:
        values = ", ".join(f"{_e(k)} = <b>{_e(_value(v))}</b>" for k, v in e["values"].items())
        note = f"<br><small>{_e(e['note'])}</small>" if e.get("note") else ""
        sql = (f"<details><summary>SQL</summary><pre>{_e(e['sql'].strip())}</pre></details>"
               if e.get("sql") else "")
        rows.append(f"<tr><td>{_e(e['name'])}</td><td>{values}{note}{sql}</td></tr>")
    return "".join(rows)


def _finding(f: dict[str, Any]) -> str:
    sev = f["severity"] if f["severity"] in ("info", "warning", "critical") else "info"
    actions = "".join(f"<li>{_e(a)}</li>" for a in f["next_actions"])
    return (f"<div class='finding {sev}'><p><span class='sev'>{_e(f['severity'])}</span> "
            f"<b>{_e(f['title'])}</b> <span class='verdict'>{_e(f['verdict'])}</span> · "
            f"confidence {float(f['confidence']):.2f}</p><p>{_e(f['summary'])}</p>"
            f"<table><tr><th>evidence</th><th>values</th></tr>{_evidence_rows(f['evidence'])}</table>"
            f"<p><b>Next:</b></p><ol>{actions}</ol></div>")


def _diagnosis(d: StoredDiagnosis) -> str:
    have = ", ".join(k for k, v in d.data_sources.items() if v) or "nothing"
    missing = ", ".join(k for k, v in d.data_sources.items() if not v)
    head = (f"<h3>{_e(d.playbook)} playbook</h3><p>diagnosed {_e(d.created_at.strftime('%Y-%m-%d %H:%M:%S'))}"
            f" UTC · data used: {_e(have)}{f' (missing: {_e(missing)})' if missing else ''}</p>")
    body = ("".join(_finding(f) for f in d.findings) if d.findings else
            "<p>No findings: nothing in this run points to a problem this playbook looks for.</p>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in d.notes)
    return head + body + (f"<p>Notes:</p><ul>{notes}</ul>" if notes else "")


def _triage(d: StoredDiagnosis) -> str:
    """The ranked list of `infbench diagnose RUN` (each finding in full under its playbook)."""
    ctx = d.context
    rows = "".join(
        f"<tr><td>{r['rank']}</td><td class='{_e(r['severity'])}'><span class='sev'>{_e(r['severity'])}</span></td>"
        f"<td>{_e(r['playbook'])}</td><td>{_e(r['title'])} <span class='verdict'>{_e(r['verdict'])}</span></td>"
        f"<td>{_e(_damage(r.get('damage')))}</td></tr>" for r in ctx.get("ranked", []))
    lacked = "".join(f"<li><code>{_e(m['source'])}</code>{' (would settle a question here)' if m['relevant'] else ''}: "
                     f"{_e(m['question'])}</li>" for m in ctx.get("missing_data", []))
    return ("<h3>All playbooks, ranked (<code>infbench diagnose RUN</code>)</h3>"
            + (f"<table><tr><th>#</th><th>severity</th><th>playbook</th><th>finding</th>"
               f"<th>damage (share of the run's p99 tail)</th></tr>{rows}</table>" if rows else "")
            + (f"<p>Data this run lacked:</p><ul>{lacked}</ul>" if lacked else ""))


def _damage(d: dict[str, Any] | None) -> str:
    if not d or d.get("score") is None:
        return "whole run"
    return ", ".join(f"{d[k]:.0%} {w}" for k, w in (("itl_p99_share", "of p99 ITL"),
                                                   ("ttft_p99_share", "of p99 TTFT"),
                                                   ("lost_share", "lost")) if d.get(k)) or "none"


def headline_block(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """What the page opens with when the run was triaged: the headline, linked to the detail."""
    triage = load_diagnoses(con, run_id, "triage")
    if not triage:
        return ""
    h = triage[0].context.get("headline") or {}
    sev = h.get("severity") if h.get("severity") in ("warning", "critical") else "info"
    text = (f"{_e(h.get('text'))} <span class='verdict'>{_e(h.get('playbook'))}: {_e(h.get('verdict'))}</span>"
            if h.get("verdict") else "No problem found: nothing above info.")
    return f"<div class='headline {sev}'><a href='#diagnosis'>Diagnosis</a>: {text}</div>"


def diagnosis_section(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The section's HTML: every stored diagnosis of the run, or how to produce one."""
    diagnoses = load_diagnoses(con, run_id)
    if not diagnoses:
        body = (f"<p>This run has not been diagnosed. Run <code>infbench diagnose "
                f"{_e(run_id)}</code> against this store and write the report again.</p>")
    else:
        body = "".join(_triage(d) for d in diagnoses if d.playbook == "triage") + \
            "".join(_diagnosis(d) for d in diagnoses if d.playbook != "triage")
    return f"<h2 id='diagnosis'>Diagnosis</h2>{body}"
