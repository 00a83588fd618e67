"""The memory playbook's cap test: the recommended cap and the run's own concurrency, each
run against the same target with the run's workload, stored and analysed as a sweep."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from infbench.console import make_console, print_warning
from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.execute import execute_run
from infbench.loadgen.lengths import LengthDist
from infbench.loadgen.preflight import PreflightError, preflight
from infbench.loadgen.run_config import resolved_config
from infbench.loadgen.runner import RunSettings
from infbench.loadgen.workloads.build import build_workload
from infbench.store import open_store
from infbench.sweep.analysis import analyse
from infbench.sweep.store import add_point, create_sweep, new_sweep_id, save_result
from playbooks.memory import diagnose_memory


def cap_sweep(db: Path, run_ref: str, url: str | None, duration: float) -> tuple[str, str | None]:
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
