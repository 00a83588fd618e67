"""The memory playbook's cap test: the recommended cap and the run's own concurrency, each
run against the same target with the run's workload, stored and analysed as a sweep."""

from __future__ import annotations

import json
from pathlib import Path

from infbench.console import make_console, print_warning
from infbench.loadgen.preflight import PreflightError
from infbench.pipeline.request import LoadSpec, TargetSpec, TelemetrySpec, WorkloadSpec
from infbench.pipeline.sweep import SweepRequest, run_sweep
from infbench.store import open_store
from infbench.sweep.loop import SweepPlan
from infbench.sweep.points import Point
from playbooks.memory import diagnose_memory


def cap_sweep(db: Path, run_ref: str, url: str | None, duration: float,
              api_key: str | None = None) -> tuple[str, str | None]:
    """The cap the memory playbook recommends, and the run's own concurrency, each run for
    `duration` seconds against the target with the run's workload, stored as a sweep (the
    sweep pipeline's runs, store and analysis); None when there is nothing to test."""
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
    if row is None:  # the run was diagnosed, so its row is there
        raise ValueError(f"run {diag.run_id}: no longer in the store")
    cfg = json.loads(row[0])
    wl_cfg, target_cfg = cfg.get("workload") or {}, cfg.get("target") or {}
    if wl_cfg.get("workload") != "synthetic":
        raise ValueError(f"--test-cap: reruns synthetic workloads only (this run's is "
                         f"{wl_cfg.get('workload')!r}); run `infbench sweep --points "
                         f"{x['cap']},{x['observed_concurrency']}` with its workload")
    points = [x["cap"], x["observed_concurrency"]]
    base = url or target_cfg.get("url") or ""
    request = SweepRequest(
        db,
        TargetSpec(base, target_cfg.get("model"),
                   target_cfg.get("endpoint", "completions"), api_key=api_key),
        WorkloadSpec.parse("synthetic", wl_cfg["input_tokens"], wl_cfg["output_tokens"]),
        LoadSpec(duration, seed=int(cfg.get("seed") or 0),
                 slo_ms={k: float(v) for k, v in (cfg.get("slo_ms") or {}).items()}),
        # No live watch: the test measures queueing at two loads the playbook has already
        # explained; a capture would only stretch its few seconds.
        TelemetrySpec(scrape_interval_s=float(cfg.get("scrape_interval_s") or 1.0), watch=None),
        SweepPlan("concurrency", [Point("concurrency", c) for c in points]),
        describe={"mode": "concurrency", "points": points, "duration_s": duration,
                  "cap_test_for": diag.run_id},
        roofline=False)
    console = make_console(stderr=True)

    def announce(idx: int, p: Point) -> None:
        console.print(f"cap test: concurrency {p.value:g} for {duration:g} s", style="dim", markup=False)

    try:
        sweep_id, _ = run_sweep(request, base, lambda line: print_warning(line, console), announce,
                                lambda line: console.print(line, markup=False))
    except PreflightError as exc:
        raise ValueError(f"--test-cap: {str(exc).splitlines()[0]} (the sweep needs the target "
                         "up again: start it and pass --url)") from None
    return diag.run_id, sweep_id
