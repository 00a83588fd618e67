"""The summary table printed at the end of a run (and by `infbench show`)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from infbench.report.tenants_view import terminal_tables


def _ms(v: Any) -> str:
    """Milliseconds to at most 7 characters, so the latency table fits an 80-column terminal."""
    if v is None:
        return "-"
    if abs(v) < 100:
        return f"{v:.2f}"
    if abs(v) < 10_000:
        return f"{v:,.1f}"
    return f"{v:,.0f}"


def print_summary(console: Console, summary: dict[str, Any], header: dict[str, Any] | None = None) -> None:
    s = summary
    if header:
        console.print(Text.assemble(("run ", "bold"), (str(header.get("run_id")), "bold cyan"),
                                    f"  {header.get('status', s.get('status', ''))}",
                                    f"  {header.get('model', '')} @ {header.get('target_url', '')}"))
    status = s.get("status")
    if status and status != "completed":
        console.print(f"[bold yellow]run {status}[/]: {s.get('status_reason') or ''}")
    if s.get("client_bound"):
        console.print("[bold white on red] CLIENT-BOUND [/] the load generator, not the target, limited "
                      "this run; latencies include client delay:")
        for reason in s["client_health"]["client_bound_reasons"]:
            console.print(f"  [red]• {reason}[/]")
    overview = Table(title="Run", show_header=False, box=None, pad_edge=False)
    overview.add_column(style="bold")
    overview.add_column(justify="right")
    rows = [
        ("Duration (s)", f"{s['duration']:.2f}"),
        ("Requests completed / failed", f"{s['completed']} / {s['failed']}"),
        ("Excluded (warm-up, cool-down)", str(s["excluded_warmup_cooldown"])),
        ("Request throughput (req/s)", f"{s['request_throughput']:.2f}"),
        ("Input tokens/s", f"{s['input_throughput']:,.1f}"),
        ("Output tokens/s", f"{s['output_throughput']:,.1f}"),
        ("Output tokens from usage / counted",
         f"{s['output_tokens_source']['usage']} / {s['output_tokens_source']['counted']}"),
    ]
    il = s.get("input_length")
    if il:
        rows.append(("Input tokens asked / counted (mean)",
                     f"{il['mean_target_tokens']:,.1f} / {il['mean_actual_tokens']:,.1f} ({il['mean_error_pct']:+.1f}%)"))
        rows.append(("Prompts within 1% of their target", f"{il['within_1pct']} of {il['requests']}"))
    wr = s.get("workload_rows")
    if wr:
        unit = "record" if "records_read" in wr else "row"
        rows.append((f"{unit.capitalize()}s used from {wr['file']}",
                     f"{wr[f'{unit}s_used']} of {wr[f'{unit}s_read']}"))
    if "coalesced_fraction" in s:
        rows.append(("Tokens that shared a socket read", f"{s['coalesced_fraction']:.1%}"))
    if "request_goodput" in s:
        slo = ", ".join(f"{k}≤{v:g}ms" for k, v in s["slo_ms"].items())
        rows.append((f"Goodput (req/s) [{slo}]", f"{s['request_goodput']:.2f} ({s['goodput_fraction']:.0%})"))
    for k, v in rows:
        overview.add_row(k, v)
    console.print(overview)

    lat = Table(title="Latency (ms)", box=box.SIMPLE_HEAD, padding=(0, 1), caption_justify="left",
                caption="* from the intended send time (the schedule), so a client that fell behind "
                        "shows. ITL: each read's gap spread over the tokens it brought; ITL raw: "
                        "per-event gaps, 0 inside a read (vLLM's). E2E ends at the last event with "
                        "choices; Tail: usage/[DONE] after it")
    lat.add_column("metric", style="bold", no_wrap=True)
    for col in ("mean", "p50", "p90", "p95", "p99", "p99.9", "max"):
        lat.add_column(col, justify="right", no_wrap=True)
    for name, label in (("ttft", "TTFT"), ("ttft_intended", "TTFT*"), ("itl", "ITL"), ("raw_itl", "ITL raw"),
                        ("tpot", "TPOT"), ("e2el", "E2E"), ("e2el_intended", "E2E*"), ("trailing", "Tail")):
        _, prefix, key = name.rpartition("raw_")  # raw_itl: keys raw_<stat>_itl_ms
        if name in ("raw_itl", "trailing") and f"{prefix}mean_{key}_ms" not in s:
            continue  # a summary stored before this figure existed
        lat.add_row(label, *(_ms(s.get(f"{prefix}{c}_{key}_ms")) for c in
                             ("mean", "p50", "p90", "p95", "p99", "p99.9", "max")))
    console.print(lat)

    if len(s.get("by_label", {})) > 1:
        bl = Table(title="By label")
        for c in ("label", "requests", "completed", "p50 TTFT", "p99 TTFT", "p50 TPOT", "p99 TPOT", "p99 E2E"):
            bl.add_column(c, justify="right" if c != "label" else "left")
        for label, v in s["by_label"].items():
            bl.add_row(label, str(v["requests"]), str(v["completed"]), _ms(v["median_ttft_ms"]),
                       _ms(v["p99_ttft_ms"]), _ms(v["median_tpot_ms"]), _ms(v["p99_tpot_ms"]),
                       _ms(v["p99_e2el_ms"]))
        console.print(bl)

    for table in terminal_tables(s):  # by tenant, by adapter (tenants_view.py)
        console.print(table)

    if s.get("fleet"):
        _print_fleet(console, s["fleet"])
    if s.get("workers"):
        _print_workers(console, s["workers"])

    if s.get("errors"):
        et = Table(title="Errors (all phases)")
        et.add_column("class")
        et.add_column("count", justify="right")
        for k, v in s["errors"].items():
            et.add_row(k, str(v))
        console.print(et)

    h = s["client_health"]
    cpu = "-" if h["mean_cpu_percent"] is None else f"{h['mean_cpu_percent']:.0f}% mean, {h['max_cpu_percent']:.0f}% max"
    console.print(
        f"[bold]Client health[/]: schedule lag p99 {_ms(h['p99_schedule_lag_ms'])} ms, "
        f"event-loop lag p99 {_ms(h['p99_loop_lag_ms'])} ms (max {_ms(h['max_loop_lag_ms'])}), CPU {cpu}"
    )
    for w in s.get("warnings", []):
        if w not in h["client_bound_reasons"]:
            console.print(f"[yellow]warning:[/] {w}")
    for w in s.get("watch") or []:  # what the live watch saw, and what it captured then
        line = Text.assemble(("Live watch", "bold"), f" at {w['t_s']:.1f} s: {w['kind']}: "
                             f"{w['summary']}; captured {', '.join(w['captured']) or 'nothing'}")
        if w["failed"]:
            line.append("; not captured: " + "; ".join(f"{f['what']} ({f['why']})" for f in w["failed"]))
        console.print(line)
    if s.get("watch"):
        console.print(Text("Diagnose it: infbench diagnose RUN (the captures are stored with the run)",
                           style="dim"))


def _print_fleet(console: Console, fleet: dict[str, Any]) -> None:
    """A fleet run: one row per replica and the fleet's; concurrency is what each request met
    on its replica when sent (`infbench diagnose replicas` compares latencies at equal load)."""
    route = fleet["route"]
    shares = route.get("shares")
    title = f"Replicas (route: {route['kind']}" + (
        ", " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()) if shares else "") + ")"
    t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1))
    t.caption = "conc: mean requests in flight on the replica when each was sent; latencies in ms"
    t.caption_justify = "left"
    for c in ("replica", "sent", "share", "fail", "conc", "TTFT\np50", "TTFT\np99", "TPOT\np50",
              "TPOT\np99", "E2E\np99"):
        t.add_column(c, justify="left" if c == "replica" else "right", no_wrap=True)

    def num(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for name, v in [(r["name"], r) for r in fleet["replicas"]] + [("fleet", fleet["fleet"])]:
        t.add_row(Text(str(name)), str(v.get("requests_sent", 0)), num(v.get("share", 1.0), ".0%"),
                  str(v.get("failed", 0)), num(v.get("mean_concurrency"), ".1f"),
                  _ms(v.get("median_ttft_ms")), _ms(v.get("p99_ttft_ms")),
                  _ms(v.get("median_tpot_ms")), _ms(v.get("p99_tpot_ms")), _ms(v.get("p99_e2el_ms")))
    console.print(t)


def _print_workers(console: Console, w: dict[str, Any]) -> None:
    """A run made by several workers (`--workers`, `--ray`): each one's share in one line."""
    unc = w.get("max_clock_uncertainty_ms") or 0.0
    clocks = "one shared clock" if not unc else f"cross-node times ±{2 * unc:.2f} ms"
    parts = [f"{p['worker']} {p['status']} {p['stored_requests']}"
             + (f"/{p['planned_requests']}" if p.get("planned_requests") is not None else "")
             for p in w.get("per_worker", [])]
    line = Text.assemble(("Workers", "bold"), f": {w['count']} ({w['backend']}), "
                         f"{w['lost_requests']} requests lost, {clocks}; stored per worker: " + ", ".join(parts))
    console.print(line)
