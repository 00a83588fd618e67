"""The per-tenant and per-adapter tables (`summary["by_tenant"]`, `["by_adapter"]`,
loadgen.tenant_summary) as the terminal summary and the HTML report show them."""

from __future__ import annotations

import html
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

SECTIONS = (("by_tenant", "tenant", "By tenant"), ("by_adapter", "adapter", "By adapter"))
_COLUMNS = ("requests", "share", "failed", "p50 TTFT", "p99 TTFT", "p50 TPOT", "p99 TPOT",
            "p99 E2E", "input tok", "output tok")
_MS = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_e2el_ms")


def _ms(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 1000 else f"{v:.1f}"


def _cells(v: dict[str, Any]) -> list[str]:
    return [str(v["requests"]), f"{v['share']:.0%}", str(v["failed"]),
            *(_ms(v.get(k)) for k in _MS),
            f"{v['total_input_tokens']:,}", f"{v['total_output_tokens']:,}"]


def terminal_tables(summary: dict[str, Any]) -> list[Table]:
    """One rich table per section the summary has (names printed literally, never as markup).
    Narrower than the HTML one, to fit 80 columns: E2E and input tokens are in the JSON and
    the HTML report."""
    out = []
    for key, what, title in SECTIONS:
        groups = summary.get(key)
        if not groups:
            continue
        t = Table(title=f"{title} (ms)", box=box.SIMPLE_HEAD, padding=(0, 1))
        t.add_column(what, overflow="fold")
        for c in ("req", "share", "fail", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "out tok"):
            t.add_column(c, justify="right")
        for name, v in groups.items():
            cells = _cells(v)
            # a Text: the user's name is never read as markup
            t.add_row(Text(name), *cells[:7], cells[9])
        out.append(t)
    return out


def html_tables(summary: dict[str, Any]) -> str:
    """The same tables as HTML (names escaped)."""
    parts = []
    for key, what, title in SECTIONS:
        groups = summary.get(key)
        if not groups:
            continue
        head = "".join(f"<th>{html.escape(c)}</th>" for c in (what, *_COLUMNS))
        body = "".join(f"<tr><td>{html.escape(name)}</td>"
                       + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(v)) + "</tr>"
                       for name, v in groups.items())
        parts.append(f"<h2>{title}</h2><table><tr>{head}</tr>{body}</table>")
    if parts:
        parts.append("<p style='font-size:12px'>Latencies in ms over each group's completed "
                     "requests in the measured phase; share: of the requests sent.</p>")
    return "".join(parts)
