"""`infbench diagnose <playbook> RUN`: run a playbook over a recorded run, print its findings
and keep them in the store with the run (for `infbench report` and `infbench export`)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from infbench.console import make_console, print_error, print_warning
from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.execute import execute_run
from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.preflight import PreflightError, preflight
from infbench.loadgen.run_config import resolved_config
from infbench.loadgen.runner import RunSettings
from infbench.loadgen.workloads.build import build_workload
from infbench.store import StoreError, open_store
from infbench.store.findings import save_diagnosis
from infbench.sweep.analysis import analyse
from infbench.sweep.store import add_point, create_sweep, new_sweep_id, save_result
from playbooks import Diagnosis, StallOptions, diagnose_stalls
from playbooks.hang import HangOptions, diagnose_hang, resolve_capture
from playbooks.mbu import MbuOptions, diagnose_mbu
from playbooks.memory import MemoryOptions, diagnose_memory
from playbooks.replicas import ReplicaOptions, diagnose_replicas
from playbooks.startup import StartupOptions, diagnose_startup
from probes.hang import CaptureError, capture, store_capture
from probes.startup_log import StartupLogError, import_startup_log

app = typer.Typer(help="Diagnose a recorded run with a playbook (runbooks: playbooks/*/*.md).",
                  no_args_is_help=True, add_completion=False)

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


@app.callback()
def _playbooks() -> None:
    # Typer turns an app with a single command into that command; this keeps `diagnose` a
    # group, so `infbench diagnose stalls RUN` stays the spelling as playbooks are added.
    pass


def _fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def print_diagnosis(console: Console, diag: Diagnosis, show_sql: bool = False) -> None:
    have = ", ".join(k for k, v in diag.data_sources.items() if v) or "nothing"
    missing = ", ".join(k for k, v in diag.data_sources.items() if not v)
    subject = (f"start-up log [bold]{diag.run_id}[/]" if diag.context.get("log_id") == diag.run_id
               else f"run [bold]{diag.run_id}[/]" if diag.run_id
               else f"capture [bold]{diag.context.get('capture_id')}[/]")
    console.print(f"[bold]{diag.playbook}[/] playbook on {subject}")
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


def _open(db: Path, save: bool) -> tuple[duckdb.DuckDBPyConnection, str | None]:
    """Writable when saving (an older file is migrated); a store that cannot be opened for
    writing is still diagnosed read-only, and the reason it will not be saved comes back.
    The caller owns and closes the connection."""
    if not save or not db.exists():  # a missing file must not be created by a diagnosis
        return open_store(db, read_only=True), None
    try:
        return open_store(db), None
    except StoreError as exc:
        return open_store(db, read_only=True), str(exc)


@app.command("stalls")
def stalls(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    itl_target: float = typer.Option(50.0, "--itl-target", help="ITL target (ms) for the token budget."),
    min_stall: float = typer.Option(50.0, "--min-stall", help="Smallest gap (ms) counted as a stall."),
    model: str | None = typer.Option(None, help="Model (overrides what the run recorded)."),
    gpu: str | None = typer.Option(None, help="GPU (overrides what the run recorded)."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the run (replacing this playbook's earlier ones)."),
) -> None:
    """Why the token stream stutters: stall events, periodicity, prefill interference."""
    try:
        options = StallOptions(itl_target_ms=itl_target, min_stall_ms=min_stall, model=model, gpu=gpu)
        options.validate()
    except ValueError as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_stalls(con, run_id, options), db, save, json_out, sql,
                  report_hint=True)


@app.command("mbu")
def mbu(
    ref: str = typer.Argument(..., help="Run id, unique prefix or 'last'; or a trace id linked to a run."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    reported: float | None = typer.Option(None, "--reported", help="The MBU a dashboard shows "
                                          "(0.60 or 60): names the mistake that explains it."),
    model: str | None = typer.Option(None, help="Model (overrides what the run recorded)."),
    gpu: str | None = typer.Option(None, help="GPU (overrides what the run recorded)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel size (overrides the run's)."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the run (replacing this playbook's earlier ones)."),
) -> None:
    """Decode MBU computed right, where the missing bandwidth goes, and which dashboard mistake
    explains a reported figure (runbook: playbooks/mbu/mbu.md)."""
    try:
        options = MbuOptions(reported=reported, model=model, gpu=gpu, tensor_parallel_size=tp)
        options.validate()
    except ValueError as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_mbu(con, ref, options), db, save, json_out, sql,
                  report_hint=False)


@app.command("replicas")
def replicas(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last' (a fleet run: infbench run --url A --url B ...)."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    min_effect: float = typer.Option(0.10, "--min-effect", help="Slower means at least this much (0.10 = 10%) higher latency than the peers at matched load."),
    busier_ratio: float = typer.Option(1.25, "--busier-ratio", help="Busier means sent this many times the peers' requests, or meeting this many times their load."),
    replica_url: list[str] = typer.Option([], "--replica-url", help="A one-URL run: a replica's own address, for the measurement plan's commands (repeat per replica)."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the run (replacing this playbook's earlier ones)."),
) -> None:
    """Which replica drags the fleet: slower at equal load or only busier, its share of the
    fleet's p99, then its GPU telemetry against its peers' (runbook: playbooks/replicas/replicas.md)."""
    try:
        options = ReplicaOptions(min_effect=min_effect, busier_ratio=busier_ratio, db=str(db),
                                 replica_urls=list(replica_url))
        options.validate()
    except ValueError as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_replicas(con, run_id, options), db, save, json_out, sql,
                  report_hint=True)


@app.command("startup")
def startup(
    logfile: Path = typer.Argument(..., help="The engine's start-up log (vLLM, SGLang, the bundled engine)."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB); the log is imported into it."),
    run: str | None = typer.Option(None, "--run", help="Link the log to this run (id, prefix or "
                                   "'last') and keep the findings with it."),
    model: str | None = typer.Option(None, help="Model (when the log does not say)."),
    gpu: str | None = typer.Option(None, help="GPU (when the log does not say)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel size (when the log does not say)."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="max_model_len (when the log does not say)."),
    gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization",
                                                        help="As the engine was started."),
    dtype: str | None = typer.Option(None, "--dtype", help="Weight format (auto, bf16, fp8, ...)."),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help="KV cache format."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
) -> None:
    """Why an engine did (not) start: its start-up log's memory phases beside `infbench plan
    memory`'s arithmetic, and the priced fixes (runbook: playbooks/startup/startup.md)."""
    options = StartupOptions(model=model, gpu=gpu, tp=tp, max_model_len=max_model_len,
                             gpu_memory_utilization=gpu_memory_utilization, dtype=dtype,
                             kv_cache_dtype=kv_cache_dtype)
    try:
        options.validate()
        con = open_store(db)
        try:
            imported = import_startup_log(con, logfile, run)
        finally:
            con.close()
    except (StartupLogError, StoreError, ValueError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_startup(con, imported.log_id, options), db,
                  imported.run_id is not None, json_out, sql, report_hint=False)


@app.command("memory")
def memory(
    run_id: str = typer.Argument(..., help="Run id, unique prefix, or 'last'."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    test_cap: bool = typer.Option(False, "--test-cap", help="If the KV pool ran out: run a short "
                                  "closed-loop sweep at the recommended cap and at the run's "
                                  "concurrency against the same target, and judge the cap."),
    url: str | None = typer.Option(None, help="Target for --test-cap (default: the run's URL)."),
    cap_duration: float = typer.Option(8.0, "--cap-duration", help="Seconds per --test-cap point."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the run (replacing this playbook's earlier ones)."),
) -> None:
    """Where a run's memory went: fixed vs growing components, bytes per finished request and
    the suspects that rules out, KV exhaustion and a concurrency cap (runbook:
    playbooks/memory/memory.md)."""
    if not cap_duration > 0:
        raise _fail(f"cap_duration: must be > 0, got {cap_duration}")
    sweep_id = None
    if test_cap:
        try:
            # The run is named once: the sweep's own runs become the store's 'last'.
            run_id, sweep_id = _cap_sweep(db, run_id, url, cap_duration)
        except (PreflightError, StoreError, ValueError) as exc:
            raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_memory(con, run_id, MemoryOptions(cap_sweep_id=sweep_id)),
                  db, save, json_out, sql, report_hint=True)


def _cap_sweep(db: Path, run_ref: str, url: str | None, duration: float) -> tuple[str, str | None]:
    """The cap the memory playbook recommends, and the run's own concurrency, each run for
    `duration` seconds against the target with the run's workload, stored as a sweep (the
    sweep machinery's store and analysis); None when there is nothing to test."""
    con = open_store(db, read_only=True)
    try:
        diag = diagnose_memory(con, run_ref)
        row = con.execute("SELECT config FROM runs WHERE run_id = ?", [diag.run_id]).fetchone()
    finally:
        con.close()
    x = diag.context.get("kv_exhaustion")
    if not x or x["cap"] < 1 or x["observed_concurrency"] <= x["cap"]:
        print_warning("--test-cap: the KV pool did not run out above a cap; nothing to test")
        return diag.run_id, None
    cfg = json.loads(row[0])
    wl_cfg, target_cfg = cfg.get("workload") or {}, cfg.get("target") or {}
    slo = {k: float(v) for k, v in (cfg.get("slo_ms") or {}).items()}
    if wl_cfg.get("workload") != "synthetic":
        raise ValueError(f"--test-cap: reruns synthetic workloads only (this run's is "
                         f"{wl_cfg.get('workload')!r}); run `infbench sweep --points "
                         f"{x['cap']},{x['observed_concurrency']}` with its workload")
    base = url or target_cfg.get("url")
    endpoint, model = target_cfg.get("endpoint", "completions"), target_cfg.get("model")
    in_len = LengthDist.parse(wl_cfg["input_tokens"], "input_tokens")
    out_len = LengthDist.parse(wl_cfg["output_tokens"], "output_tokens")
    try:  # before anything is stored: an unreachable target leaves no empty sweep behind
        asyncio.run(preflight(base, endpoint, model, None))
    except PreflightError as exc:
        raise ValueError(f"--test-cap: {str(exc).splitlines()[0]} (the sweep needs the target "
                         "up again: start it and pass --url)") from None
    sweep_id = new_sweep_id()
    points = [x["cap"], x["observed_concurrency"]]
    con = open_store(db)
    try:
        create_sweep(con, sweep_id, "concurrency", {"mode": "concurrency", "points": points,
                                                    "duration_s": duration, "cap_test_for": diag.run_id})
    finally:
        con.close()
    console = make_console(stderr=True)
    for idx, conc in enumerate(points):
        target = asyncio.run(preflight(base, endpoint, model, None))
        wl = build_workload("synthetic", input_len=in_len, output_len=out_len, target=target,
                            prefix_groups=4, prefix_tokens=512, turns=3, dataset=None, trace=None,
                            time_scale=1.0, trace_start=0.0, trace_end=None)
        settings = RunSettings(
            url=target.url, endpoint=endpoint, model=target.model,
            arrivals=Arrivals("closed", concurrency=conc), duration_s=duration,
            seed=int(cfg.get("seed") or 0), ignore_eos=target.ignore_eos_supported,
            metrics_url=target.metrics_url, steps_url=target.steps_url,
            steps_after=target.steps_after,
            scrape_interval_s=float(cfg.get("scrape_interval_s") or 1.0))
        settings.validate()
        config = resolved_config(settings, wl, target, slo, bundled=False, engine_args=[])
        config["sweep"] = {"sweep_id": sweep_id, "point_idx": idx, "kind": "concurrency",
                           "value": conc}
        console.print(f"cap test: concurrency {conc} for {duration:g} s", style="dim", markup=False)
        result = execute_run(settings, wl, db, config, slo, None)
        con = open_store(db)
        try:
            add_point(con, sweep_id, idx, result.run_id, "concurrency", conc)
        finally:
            con.close()
    con = open_store(db)
    try:
        pts = [tuple(r) for r in con.execute(
            "SELECT point_idx, run_id, kind, value FROM sweep_points WHERE sweep_id = ? "
            "ORDER BY value, point_idx", [sweep_id]).fetchall()]
        result = analyse(con, pts, slo, None)  # type: ignore[arg-type]
        result["sweep_id"] = sweep_id
        save_result(con, sweep_id, result)
    finally:
        con.close()
    return diag.run_id, sweep_id


@app.command("hang")
def hang(
    url: str | None = typer.Option(None, "--url", help="The engine: GET /debug/ranks, POST "
                                   "/debug/flight_recorder/dump, py-spy on every rank's pid."),
    pids: str | None = typer.Option(None, "--pids", help="The ranks' process ids, comma-separated "
                                    "(rank order, unless each process has a RANK variable)."),
    dumps: Path | None = typer.Option(None, "--dumps", help="A folder of Flight Recorder dumps "
                                      "(rank_0, nccl_trace_rank_1, ...) and optional "
                                      "stacks_<rank>.json (py-spy --json) or .txt (faulthandler)."),
    capture: str | None = typer.Option(None, "--capture", help="Diagnose a stored capture "
                                       "again (id, prefix or 'last')."),
    run: str | None = typer.Option(None, "--run", help="Link the capture to this run (id, "
                                   "prefix or 'last'): the findings are kept with it."),
    db: Path = typer.Option(Path("infbench.duckdb"), "--db", "--store", help="Store file (DuckDB)."),
    min_wait: float = typer.Option(1.0, "--min-wait", help="Seconds a collective must have "
                                   "been pending at the dump to count as stuck."),
    json_out: bool = typer.Option(False, "--json", help="The diagnosis as JSON on stdout."),
    sql: bool = typer.Option(False, "--sql", help="Show the SQL behind each piece of evidence."),
    save: bool = typer.Option(True, "--save/--no-save", help="Keep the findings in the store "
                              "with the linked run (replacing this playbook's earlier ones)."),
) -> None:
    """Which rank of a multi-rank engine is behind or mismatched, on which collective, and
    where every rank waits (runbook: playbooks/hang/hang.md)."""
    options = HangOptions(min_wait_s=min_wait)
    try:
        options.validate()
    except ValueError as exc:
        raise _fail(str(exc)) from None
    given = [n for n, v in (("--url", url), ("--pids", pids), ("--capture", capture)) if v]
    if len(given) > 1 or (capture and dumps) or (url and dumps) or not (given or dumps):
        raise _fail("give one of --url URL, --pids P,... (optionally with --dumps DIR), "
                    "--dumps DIR or --capture ID")
    if capture and run:
        raise _fail("--run links a new capture; a stored capture keeps the run it was linked to")
    try:
        ref, run_id = capture, None
        if capture is None:
            ref, run_id = _capture_hang(url, pids, dumps, run, db, json_out)
        else:
            con = open_store(db, read_only=True)
            try:
                run_id = resolve_capture(con, capture)[1]
            finally:
                con.close()
    except (CaptureError, StoreError, ValueError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    _run_playbook(lambda con: diagnose_hang(con, str(ref), options), db, save and run_id is not None,
                  json_out, sql, report_hint=run_id is not None)
    if run_id is None and not json_out:
        make_console().print(f"findings not kept with a run (link one with --run RUN); "
                             f"`infbench diagnose hang --capture {ref} --db {db}` shows them again",
                             style="dim", markup=False)


def _capture_hang(url: str | None, pids: str | None, dumps: Path | None, run: str | None,
                  db: Path, quiet: bool) -> tuple[str, str | None]:
    """Capture every rank, store it (linked to `run`); returns (capture id, run id)."""
    cap = capture(url, pids, dumps)
    con = open_store(db)
    try:
        store_capture(con, cap, run)
    finally:
        con.close()
    if not quiet:
        console = make_console()
        console.print(f"captured {cap.capture_id} into {db}", markup=False)
        for line in cap.summary_lines():
            console.print(Text(f"  {line}"))
    return cap.capture_id, cap.run_id


def _run_playbook(run: Callable[[duckdb.DuckDBPyConnection], Diagnosis], db: Path, save: bool,
                  json_out: bool, sql: bool, *, report_hint: bool) -> None:
    """Diagnose, keep the findings with the run unless told not to (a store that cannot be
    written is still diagnosed, with a warning), then show them."""
    saved: int | None = None
    try:
        con, not_saved = _open(db, save)
        try:
            diag = run(con)
            if save and not_saved is None:
                try:
                    saved = save_diagnosis(con, diag.to_dict())
                except StoreError as exc:
                    not_saved = str(exc)
        finally:
            con.close()
    except (StoreError, ValueError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    if not_saved is not None:
        print_warning(f"findings diagnosed but not saved: {not_saved.splitlines()[0]}")
    if json_out:
        sys.stdout.write(json.dumps(diag.to_dict(), indent=2, default=str) + "\n")
        return
    console = make_console()
    print_diagnosis(console, diag, sql)
    if saved is not None:
        hint = (f"; `infbench report {diag.run_id} --db {db} --html FILE` shows them"
                if report_hint else "")
        console.print(f"saved {saved} finding(s) to {db}{hint}", style="dim", markup=False)
