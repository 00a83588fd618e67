"""`infbench probe gpu | links | import-nccl-tests | list-links | show-links`: the hardware
under a server: GPU telemetry through NVML (nvidia-ml-py); collective and point-to-point link
bandwidth between N local ranks (probes.links) and nccl-tests output read into the same table."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from infbench.command_support import fail, store_or_exit
from infbench.console import make_console
from infbench.exit_codes import FAIL
from infbench.store import StoreError, open_store
from probes.gpu.nvml import NvmlUnavailable
from probes.gpu.run_probe import DEFAULT_INTERVAL_S, probe_for, store_probe
from probes.gpu.summary import summarize_gpus

app = typer.Typer(help="Probe the hardware under a server: GPU telemetry through NVML; collective and "
                  "point-to-point link bandwidth (nccl-tests' busbw), nccl-tests output imported.",
                  no_args_is_help=True, add_completion=False)


def _fmt(v: Any, unit: str = "", digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}{unit}"


def _lines(summary: list[dict[str, Any]]) -> list[str]:
    """One block per GPU, one line per field: readable at any terminal width."""
    out = []
    for g in summary:
        sm, p, pc = g["sm_clock_mhz"], g["power_w"], g["pcie"]
        reasons = ", ".join(f"{k} {v:.0%}" for k, v in g["clock_event_reasons"].items()) or "none"
        out += [
            f"GPU {g['gpu']} {g['model_name'] or ''} {g['uuid'] or ''}".rstrip(),
            f"  SM clock MHz    min {_fmt(sm['min'])}  median {_fmt(sm['median'])}  max {_fmt(sm['max'])}"
            f"  (board max {_fmt(g['sm_clock_max_mhz'])})",
            f"  clock events    {reasons}  (share of samples)",
            f"  power W         mean {_fmt(p['mean'])}  max {_fmt(p['max'])}  (limit {_fmt(g['power_limit_w'])})",
            f"  temperature C   max {_fmt(g['temperature_c_max'])}    utilisation % mean {_fmt(g['util_gpu_pct_mean'])}",
            f"  PCIe            Gen{_fmt(pc['gen_min'])} x{_fmt(pc['width_min'])} at its lowest"
            f"  (max Gen{_fmt(pc['gen_max'])} x{_fmt(pc['width_max'])})",
            f"  ECC (volatile)  corrected {_fmt(g['ecc_corrected'])}  uncorrected {_fmt(g['ecc_uncorrected'])}"
            f"    last XID {_fmt(g['xid'])}    NVLink active {_fmt(g['nvlink']['active_min'])}"
            f" of {_fmt(g['nvlink']['links'])}",
        ]
        if g["unavailable"]:
            out.append("  not available   " + ", ".join(f"{k} ({v})" for k, v in sorted(g["unavailable"].items())))
    return out


@app.command("gpu")
def gpu(
    duration: float = typer.Option(10.0, help="Seconds to sample for."),
    interval: float = typer.Option(DEFAULT_INTERVAL_S, help="Seconds between samples."),
    db: Path | None = typer.Option(None, help="Also store the samples in this store file as a run of their own (table gpu_samples)."),
    json_out: bool = typer.Option(False, "--json", help="Print the per-GPU summary as JSON on stdout."),
) -> None:
    """Sample every GPU on this host through NVML for --duration seconds: SM and memory clocks
    against their maximum, clock-event (throttle) reasons, power against its limit,
    temperature, utilisation, memory, PCIe generation and width against their maximum, ECC
    counts, XID events and NVLink state. Needs nvidia-ml-py (pip install 'infbench[gpu]') and
    an NVIDIA driver; without them it says so in one line and exits 1."""
    if not duration > 0:
        raise fail(f"duration: must be > 0 seconds, not {duration}")
    if not interval > 0:
        raise fail(f"interval: must be > 0 seconds, not {interval}")
    if db is not None and db.exists() and db.is_dir():
        raise fail(f"db: {db} is a directory")
    try:
        rows, t0 = probe_for(duration, interval, instance=socket.gethostname())
    except NvmlUnavailable as exc:
        raise fail(str(exc), FAIL) from None
    summary = summarize_gpus(rows)
    run_id = None
    if db is not None:
        try:
            con = open_store(db)
            try:
                run_id = store_probe(con, rows, t0, {"duration_s": duration, "interval_s": interval})
            finally:
                con.close()
        except StoreError as exc:
            raise fail(str(exc)) from None
    if json_out:
        sys.stdout.write(json.dumps({"run_id": run_id, "gpus": summary}, indent=2) + "\n")
        return
    console = make_console()
    per_gpu = max((g["samples"] for g in summary), default=0)
    console.print(f"GPU probe: {len(summary)} GPU(s), {per_gpu} samples each over {duration:g} s",
                  markup=False)
    for line in _lines(summary):
        console.print(line, markup=False, soft_wrap=True)
    if run_id is not None:
        console.print(f"stored in {db} as run {run_id}", markup=False)


# ---- link probe (probes.links) ----------------------------------------------------------

DB_LINKS = typer.Option(Path("infbench.duckdb"), "--db", "--store", help="Store file (DuckDB).")


def _num(v: Any, digits: int = 2) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _print_links(con: Any, probe: dict[str, Any]) -> None:
    from probes.links.storage import pair_table, sweep_table

    console = make_console()
    imported = probe["source"] == "nccl-tests"
    rows = sweep_table(con, probe["probe_id"])
    for op in dict.fromkeys(r[0] for r in rows):
        t = Table(title=f"{op} on {rows[0][2] or '?'} ranks" + (" (nccl-tests output)" if imported else
                                                               " (median of repeats; slowest rank's time)"))
        for col in ("size (B)", *(("in-place",) if imported else ()), "time (us)", "algbw (GB/s)",
                    "busbw (GB/s)", "#wrong", "repeats"):
            t.add_column(col, justify="right")
        for o, size, _n, in_place, time_us, alg, bus, wrong, reps in rows:
            if o == op:
                t.add_row(f"{size:,}", *(("yes" if in_place else "no",) if imported else ()), _num(time_us, 1),
                          _num(alg, 3), _num(bus, 3), "-" if wrong is None else str(wrong), str(reps))
        console.print(t)
    pairs = pair_table(con, probe["probe_id"])
    if pairs:
        t = Table(title="pairwise send/recv (both ways at once), median of repeats")
        for col in ("pair", "time (us)", "busbw (GB/s)", "repeats"):
            t.add_column(col, justify="right")
        for a, b, time_us, bus, reps in pairs:
            t.add_row(f"{a}-{b}", _num(time_us, 1), _num(bus, 3), str(reps))
        console.print(t)
    verdict = probe["verdict"] or {}
    for key, label in (("bisect", "slow-rank bisection"), ("pairwise", "pair matrix")):
        if verdict.get(key):
            console.print(f"{label}: {verdict[key]['status']}: {verdict[key]['message']}", markup=False)
    for note in probe["notes"] or []:
        console.print(f"note: {note}", markup=False)


@app.command("links")
def links(
    ranks: int = typer.Option(4, help="Ranks to start on this host (gloo on CPU; NCCL with one GPU per rank)."),
    sizes: str = typer.Option("4K:4M:4", help="Message sizes: a list (4K,64K,1M) or MIN:MAX[:FACTOR] as "
                              "nccl-tests' -b/-e/-f. A size is nccl-tests' size: the largest buffer per rank."),
    ops: str = typer.Option("all", help="Comma-separated: all_reduce, all_gather, reduce_scatter, alltoall, "
                            "broadcast (or all)."),
    dtype: str = typer.Option("float32", help="float32, float16, bfloat16 or float64."),
    warmup: int = typer.Option(3, help="Untimed calls before each measurement."),
    iters: int = typer.Option(10, help="Timed calls per measurement (their mean, as nccl-tests)."),
    repeats: int = typer.Option(3, help="Times the sweep is repeated (tables show the median)."),
    pairwise: bool = typer.Option(False, "--pairwise/--no-pairwise", help="Also measure send/recv between "
                                  "every pair of ranks and judge the pair matrix."),
    pair_size: str = typer.Option("1M", help="Message size of the pairwise send/recv."),
    bisect: bool = typer.Option(True, "--bisect/--no-bisect", help="Bisect the ranks with subgroup "
                                "all-reduces to name a slow rank (needs 4 ranks)."),
    bisect_size: str = typer.Option("1M", help="All-reduce size the bisection measures."),
    slow_ratio: float = typer.Option(1.5, help="A group or pair this many times slower than its peers is slow."),
    max_repeats: int = typer.Option(15, help="Most repeats a verdict takes before it says it cannot tell."),
    inject: str | None = typer.Option(None, help="Lab fault: slow-link:rank=R,factor=F[,peer=P] slows rank R's "
                                      "collective and p2p calls F times (the reference engine's syntax)."),
    backend: str = typer.Option("auto", help="auto (NCCL with one GPU per rank, else gloo), gloo or nccl."),
    timeout: float = typer.Option(300.0, help="Seconds before a probe whose ranks stopped answering is killed."),
    run: str | None = typer.Option(None, "--run", help="Link the probe to this run (id, prefix or 'last'): "
                                   "its report then plots it."),
    db: Path = DB_LINKS,
    json_out: bool = typer.Option(False, "--json", help="The probe's id, rows and verdicts as JSON on stdout."),
) -> None:
    """Measure collective and point-to-point link bandwidth between N local ranks (torch.distributed)
    and name the slow one: time, algbw and busbw per op and size with nccl-tests' definitions, the
    pair matrix, and a slow-rank verdict judged against peers measured in the same run. Example:
    infbench probe links --ranks 4 --sizes 64K,1M --ops all_reduce,all_gather --repeats 1"""
    from probes.links import LinkProbeError, ProbeConfig, parse_inject, parse_ops, parse_sizes
    from probes.links.plan import parse_size
    from probes.links.storage import get_probe, save_probe

    try:
        cfg = ProbeConfig(ranks=ranks, ops=parse_ops(ops), sizes=parse_sizes(sizes), dtype=dtype, warmup=warmup,
                          iters=iters, repeats=repeats, pairwise=pairwise, pair_size=parse_size(pair_size),
                          bisect=bisect, bisect_size=parse_size(bisect_size), threshold=slow_ratio,
                          max_repeats=max_repeats, backend=backend, timeout_s=timeout,
                          inject=parse_inject(inject, ranks) if inject else None)
        cfg.check()
    except LinkProbeError as exc:
        raise fail(str(exc)) from None
    if db.exists() and db.is_dir():
        raise fail(f"--db: {db} is a directory")
    with store_or_exit(db) as con:
        if run:
            _check_run(con, run)
        try:
            from probes.links.launcher import run_probe
            res = run_probe(cfg)
        except ImportError as exc:
            raise fail(f"infbench probe links needs PyTorch ({exc.name} is missing): "
                              "pip install 'infbench[engine]'", 1) from None
        except LinkProbeError as exc:
            raise fail(str(exc), 1) from None
        verdict = {"bisect": res.bisect, "pairwise": res.pairwise,
                   "inject": str(cfg.inject) if cfg.inject else None}
        stored = save_probe(con, source="infbench", rows=res.rows,
                            config={**cfg.as_dict(), "inject": str(cfg.inject) if cfg.inject else None,
                                    "torch": res.torch_version, "device": res.device, "seconds": res.seconds},
                            backend=res.backend, world_size=cfg.ranks, verdict=verdict, run=run,
                            hostname=res.hostname)
        probe = get_probe(con, stored.probe_id)
        if json_out:
            sys.stdout.write(json.dumps({**{k: v for k, v in probe.items() if k != "created_at"},
                                         "rows": res.rows}, default=str) + "\n")
            return
        _print_links(con, probe)
        make_console().print(f"stored as link probe {stored.probe_id} in {db} ({stored.rows} rows, "
                             f"{res.seconds:.1f} s measuring)", markup=False)


def _check_run(con: Any, run: str) -> None:
    from infbench.store import get_run

    try:
        get_run(con, run)
    except StoreError as exc:
        raise fail(str(exc)) from None


@app.command("import-nccl-tests")
def import_nccl_tests_cmd(
    files: list[Path] = typer.Argument(..., help="Text that all_reduce_perf, all_gather_perf, "
                                       "reduce_scatter_perf, alltoall_perf, broadcast_perf or sendrecv_perf printed."),
    op: str | None = typer.Option(None, help="The collective, where the file does not say (no 'Collective test "
                                  "starting' line, no X_perf command line, no op in its name)."),
    run: str | None = typer.Option(None, "--run", help="Link the import to this run (id, prefix or 'last')."),
    db: Path = DB_LINKS,
) -> None:
    """Import nccl-tests output (old and new column layouts) into the store's collectives table,
    one link probe per file; a file that is not nccl-tests output is named with its line and
    nothing is stored. Example: infbench probe import-nccl-tests all_reduce_perf.txt --db links.duckdb"""
    from probes.links import LinkProbeError
    from probes.links.nccl_tests import import_nccl_tests
    from probes.links.storage import get_probe

    with store_or_exit(db) as con:
        for f in files:
            try:
                stored, parsed = import_nccl_tests(con, f, op=op, run=run)
            except (LinkProbeError, StoreError) as exc:
                raise fail(str(exc)) from None
            make_console().print(f"imported {f} ({parsed.op}, {parsed.ranks or '?'} ranks, {stored.rows} rows) "
                                 f"as link probe {stored.probe_id}", markup=False)
            _print_links(con, get_probe(con, stored.probe_id))


@app.command("list-links")
def list_links(db: Path = DB_LINKS) -> None:
    """List the link probes and nccl-tests imports in a store, newest first."""
    from probes.links.storage import list_probes

    with store_or_exit(db, read_only=True) as con:
        rows = list_probes(con)
    t = Table(title=f"link probes in {db}")
    for col in ("probe", "created (UTC)", "source", "ranks", "backend", "run", "rows"):
        t.add_column(col)
    for pid, at, src, world, be, run_id, n in rows:
        t.add_row(pid, at.strftime("%Y-%m-%d %H:%M:%S"), src, str(world or "?"), be or "", run_id or "", str(n))
    make_console().print(t)


@app.command("show-links")
def show_links(
    probe: str = typer.Argument("last", help="Probe id, unique prefix, or 'last'."),
    db: Path = DB_LINKS,
    html: Path | None = typer.Option(None, "--html", help="Also write a self-contained HTML page with the "
                                     "busbw-by-size plot per op and the pair bars."),
) -> None:
    """Show a stored link probe: its tables and verdicts (and a plot page with --html)."""
    from infbench.report.link_charts import links_page
    from probes.links.storage import get_probe

    with store_or_exit(db, read_only=True) as con:
        try:
            p = get_probe(con, probe)
        except KeyError as exc:
            raise fail(str(exc.args[0])) from None
        _print_links(con, p)
        if html is not None:
            try:
                html.write_text(links_page(con, p["probe_id"]), encoding="utf-8")
            except OSError as exc:
                raise fail(f"--html {html}: {exc.strerror or exc}") from None
            make_console().print(str(html), markup=False)
