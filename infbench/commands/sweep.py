"""`infbench sweep`: runs at rising load against one target, linked in the store, and what
they show: the throughput-latency curve, its knee, the goodput maximum under --slo, and the
step-time line beside `infbench plan roofline`."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.table import Table

from infbench.command_support import fail
from infbench.console import make_console, print_warning
from infbench.loadgen.local_engine import target_url
from infbench.loadgen.preflight import PreflightError
from infbench.options.groups import grouped
from infbench.options.measured import (
    SweepLoadOptions,
    SweepOutputOptions,
    SweepPlanOptions,
    TargetOptions,
    TelemetryOptions,
    WorkloadOptions,
    sweep_request,
)
from infbench.pipeline.sweep import run_sweep
from infbench.store import StoreError
from infbench.sweep.html import sweep_html
from infbench.sweep.points import Point


@grouped
def sweep(target: TargetOptions, plan: SweepPlanOptions, workload: WorkloadOptions,
          load: SweepLoadOptions, telemetry: TelemetryOptions, output: SweepOutputOptions) -> None:
    """Sweep load (concurrency or request rate) and find the knee and the goodput maximum."""
    console = make_console(stderr=True)
    try:
        request = sweep_request(target, workload, plan, load, telemetry, output)
    except ValueError as exc:
        raise fail(str(exc)) from None

    def announce(idx: int, p: Point) -> None:
        console.print(f"sweep point {idx}: {p.label}…", style="dim", markup=False)

    try:
        with target_url(request.target.first_url, request.target.engine_args, console) as base:
            sweep_id, result = run_sweep(request, base, lambda line: print_warning(line, console),
                                         announce, lambda line: console.print(line, markup=False))
    except (PreflightError, StoreError, ValueError) as exc:
        raise fail(str(exc)) from None

    if output.html is not None:
        output.html.write_text(sweep_html(sweep_id, result), encoding="utf-8")
    if output.json_out:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
    else:
        _print(result)


def _print(result: dict[str, Any]) -> None:
    console = make_console()
    t = Table(title=f"sweep {result['sweep_id']}", title_justify="left")
    for c in ("#", "load", "req/s", "out tok/s", "p50 TTFT", "p50 TPOT", "p50 E2E", "p99 E2E", "batch", "goodput"):
        t.add_column(c, justify="right")
    knee = (result.get("knee") or {}).get("idx")
    best = (result.get("goodput_max") or {}).get("idx")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    for p in result["points"]:
        mark = (" knee" if p["idx"] == knee else "") + (" best" if p["idx"] == best else "")
        t.add_row(f"{p['idx']}{mark}", f"{p['kind'][:4]} {p['value']:.3g}", f"{p['request_throughput']:.2f}",
                  f"{p['output_throughput']:,.0f}", ms(p["p50_ttft_ms"]), ms(p["p50_tpot_ms"]),
                  ms(p["p50_e2el_ms"]), ms(p["p99_e2el_ms"]),
                  "-" if p["mean_batch"] is None else f"{p['mean_batch']:.1f}",
                  "-" if p["goodput"] is None else f"{p['goodput']:.2f}")
    console.print(t)
    sat = result.get("saturation") or {}
    if sat:
        console.print(("saturated: " if sat["reached"] else "") + sat["reason"]
                      + ("" if result.get("knee") else "; no knee named"))
    line, roof = result.get("step_line"), result.get("roofline")
    if line:
        console.print(f"step time ≈ {line['intercept_ms']:.3f} ms + {line['slope_ms']:.4f} ms × batch "
                      f"(from {line['source']}; knee B = {line['knee_batch']:.1f})")
    if roof:
        console.print(f"roofline ({roof['model']} on {roof['gpu']}, context {roof['context']}): "
                      f"{roof['roofline_intercept_ms']:.3f} ms + {roof['roofline_slope_ms']:.4f} ms × batch, "
                      f"knee B = {roof['roofline_knee_batch']:.1f}; kernels' floor "
                      f"{roof.get('kernel_floor_ms') or 0.0:.3f} ms and engine overhead "
                      f"{roof['engine_step_overhead_ms']} ms per step")
        if "measured_knee_batch_without_overhead" in roof:
            # None where the measured line does not rise with the batch (few, noisy points).
            knee = roof["measured_knee_batch_without_overhead"]
            console.print(f"measured knee without the floor and the overhead: B = "
                          f"{'-' if knee is None else f'{knee:.1f}'}; slope ratio "
                          f"{roof['slope_ratio']:.2f}")
