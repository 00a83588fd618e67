"""How a diagnosis reads in the terminal: the findings, and each playbook's own table."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from playbooks import Diagnosis
from playbooks.registry import BY_NAME

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def print_diagnosis(console: Console, diag: Diagnosis, show_sql: bool = False) -> None:
    have = ", ".join(k for k, v in diag.data_sources.items() if v) or "nothing"
    missing = ", ".join(k for k, v in diag.data_sources.items() if not v)
    console.print(f"[bold]{diag.playbook}[/] playbook on {_subject(diag)}")
    console.print(f"data used: {have}" + (f"  [dim](missing: {missing})[/]" if missing else ""))
    base = diag.context.get("itl_baseline")
    if base:
        console.print(f"ITL: median {base['median_ms']:.2f} ms, p99 {base['p99_ms']:.2f} ms, "
                      f"max {base['max_ms']:.1f} ms over {base['gaps']} gaps; stall threshold "
                      f"{base['threshold_ms']:.1f} ms")
    ev = diag.context.get("stall_events")
    if ev:
        console.print(f"stall events: {ev['engine_wide']} engine-wide, {ev['private']} private, "
                      f"{ev['undetermined']} undetermined")
    _print_replicas(console, diag.context.get("replicas"))
    _print_hang(console, diag.context)
    _print_memory(console, diag.context)
    if not diag.findings:
        console.print("[green]" + diag.context.get(
            "no_findings", "No findings: nothing in this run points to a stall or latency "
            "pathology.") + "[/]")
    for f in diag.sorted_findings():
        t = Table(show_header=True, box=None, pad_edge=False)
        t.add_column("evidence", style="bold")
        t.add_column("values")
        # Findings quote what was recorded (file paths, names from dumps, SQL with [a-z]
        # classes): printed literally, never as rich markup.
        for e in f.evidence:
            vals = Text(", ".join(f"{k}={v}" for k, v in e.values.items()))
            if e.note:
                vals.append("\n" + e.note, style="dim")
            t.add_row(Text(e.name), vals)
            if show_sql and e.sql:
                t.add_row("", Text(e.sql, style="dim"))
        body = Table.grid()
        body.add_row(Text(f.summary))
        body.add_row("")
        body.add_row(t)
        body.add_row("")
        body.add_row(Text("next: ", style="bold") + Text("\n      ".join(f.next_actions)))
        style = _STYLE[f.severity]
        title = Text(f.severity.upper(), style=style) + Text(f" {f.title} ") + Text(
            f"({f.verdict}, confidence {f.confidence:.2f} {f.confidence_label})", style="dim")
        console.print(Panel(body, title=title, border_style=style))
    split = diag.context.get("ttft_split")
    if split:
        console.print(f"TTFT split (means): client {split['client_ttft_ms']:.1f} ms = engine "
                      f"{split['engine_ttft_ms']:.1f} ms (queue {split['engine_queue_ms'] or 0:.1f}) "
                      f"+ outside the engine {split.get('outside_engine_ms', 0):.1f} ms")
    if "bimodal_itl" in diag.context:
        console.print(f"[dim]{diag.context['bimodal_itl']}[/]")
    for note in diag.notes:
        console.print(Text(f"note: {note}", style="dim"))


def _subject(diag: Diagnosis) -> str:
    """A run, or the linked record the playbook read (a capture, a start-up log) when the
    diagnosis is not kept with a run."""
    reads = BY_NAME[diag.playbook].reads if diag.playbook in BY_NAME else None
    record = diag.context.get(reads.key) if reads is not None else None
    if reads is not None and record and diag.run_id in ("", record):
        return f"{reads.noun} [bold]{record}[/]"
    return f"run [bold]{diag.run_id}[/]"


def _print_replicas(console: Console, rows: list[dict] | None) -> None:
    """The replicas playbook: each replica's latency ratio to its peers at matched load."""
    if not rows:
        return
    t = Table(title="Replicas vs their peers at matched load (ratio, interval)", box=None)
    metrics = [m for m in ("ttft", "tpot", "step") if f"{m}_ratio" in rows[0]]
    for c in ("replica", *metrics, "load", "requests", "verdict"):
        t.add_column(c, justify="left" if c in ("replica", "verdict") else "right")
    for r in rows:
        cells = []
        for m in metrics:
            ratio, iv = r.get(f"{m}_ratio"), r.get(f"{m}_interval")
            cells.append("-" if ratio is None or iv is None else f"{ratio:.2f} ({iv[0]:.2f}-{iv[1]:.2f})")
        verdict = ("failing" if r.get("failing") else "slower" if r["slower"]
                   else "busier" if r["busier"] else "ok")
        t.add_row(Text(str(r["replica"])), *cells,
                  "-" if r.get("load_ratio") is None else f"{r['load_ratio']:.2f}",
                  "-" if r.get("request_ratio") is None else f"{r['request_ratio']:.2f}", verdict)
    console.print(t)


def _print_memory(console: Console, ctx: dict) -> None:
    """The memory ledger in one line per series (fixed or growing, bytes per request)."""
    ledger = ctx.get("ledger")
    if not ledger:
        return
    console.print(f"memory ledger: {ledger['samples']} scrapes over {ledger['requests_finished']:,} "
                  "finished requests", markup=False)
    for name, s in ledger["series"].items():
        if s["slope_bytes_per_request"] is None:
            continue
        lo, hi = s["ci95"]
        console.print(f"  {name}: {s['kind']}, {s['last_bytes'] / 2**20:,.1f} MiB at the end, "
                      f"{s['slope_bytes_per_request']:,.0f} B/request (95%: {lo:,.0f} to {hi:,.0f})",
                      markup=False)
    x = ctx.get("kv_exhaustion")
    if x:
        console.print(f"  KV pool: {x['blocks_total']:,} blocks, full at {x['t_s']:.1f} s, "
                      f"{x['preemptions_after_fill']:,} preemption(s) after; cap {x['cap']}",
                      markup=False)


def _print_hang(console: Console, ctx: dict) -> None:
    """The hang playbook: every rank's progress and where it waits, then the checks made."""
    if "order_of_checks" not in ctx:
        return
    t = Table(title="Ranks", box=None)
    for c in ("rank", "pid", "dump", "stacks", "last enqueued", "last completed", "waits"):
        t.add_column(c)
    for r in ctx.get("ranks", []):
        seq = [", ".join(f"{v}" for v in (r.get(k) or {}).values()) or "-"
               for k in ("last_enqueued", "last_completed")]
        t.add_row(str(r["rank"]), str(r["pid"] or "-"), r["dump"], r["stacks"], *seq,
                  Text(r["waits"] or "-"))
    console.print(t)
    console.print("checks, in the runbook's order:")
    for line in ctx["order_of_checks"]:
        console.print(Text(f"  - {line}"))
