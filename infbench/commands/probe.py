"""`infbench probe gpu`: sample the GPUs of this host through NVML (nvidia-ml-py)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import typer

from infbench.console import make_console, print_error
from infbench.store import StoreError, open_store
from probes.gpu.nvml import NvmlUnavailable
from probes.gpu.run_probe import DEFAULT_INTERVAL_S, probe_for, store_probe
from probes.gpu.summary import summarize_gpus

app = typer.Typer(help="Probe the hardware under a server: GPU telemetry through NVML.",
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
        print_error(f"duration: must be > 0 seconds, not {duration}")
        raise typer.Exit(2)
    if not interval > 0:
        print_error(f"interval: must be > 0 seconds, not {interval}")
        raise typer.Exit(2)
    if db is not None and db.exists() and db.is_dir():
        print_error(f"db: {db} is a directory")
        raise typer.Exit(2)
    try:
        rows, t0 = probe_for(duration, interval, instance=socket.gethostname())
    except NvmlUnavailable as exc:
        print_error(str(exc))
        raise typer.Exit(1) from None
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
            print_error(str(exc))
            raise typer.Exit(2) from None
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
