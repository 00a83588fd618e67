"""`infbench metrics pull RUN --prometheus URL`: a run's window of server-side series."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from infbench.command_support import fail
from infbench.console import make_console, print_warning
from infbench.store import StoreError
from probes.gpu.prometheus import convert_pulled
from probes.prometheus.client import connect
from probes.prometheus.pull import pull_into_store

app = typer.Typer(help="Server-side metrics: pull a run's window from Prometheus into the store.",
                  no_args_is_help=True, add_completion=False)


@app.command("pull")
def pull(
    run: str = typer.Argument(..., help="Run id, a unique prefix of one, or 'last'."),
    prometheus: str = typer.Option(..., help="Prometheus base URL (http or https)."),
    selector: str | None = typer.Option(None, help="Label matchers choosing the target's series, e.g. 'namespace=\"x\",pod=~\"vllm-.*\"' (default: the scrape target at the run's URL)."),
    token_env: str | None = typer.Option(None, help="Environment variable holding a bearer token (never stored or printed)."),
    token_file: Path | None = typer.Option(None, help="File holding a bearer token (never stored or printed)."),
    ca_file: Path | None = typer.Option(None, help="CA bundle to verify an https Prometheus with."),
    insecure: bool = typer.Option(False, "--insecure", help="Do not verify the server's TLS certificate."),
    timeout: float = typer.Option(10.0, help="Seconds to wait for each answer."),
    db: Path = typer.Option(Path("infbench.duckdb"), help="Store file (DuckDB)."),
    json_out: bool = typer.Option(False, "--json", help="What was pulled, as JSON on stdout."),
) -> None:
    """Pull a run's window from Prometheus into the store (vLLM, SGLang, dcgm-exporter and node series; histograms as buckets).

    Replaces the run's earlier pull. Exit 1 when nothing could be stored (server down,
    errors only, no matching series), 0 otherwise (a partial pull warns).
    """
    try:
        client = connect(prometheus, token_env=token_env, token_file=token_file,
                         ca_file=ca_file, insecure=insecure, timeout_s=timeout)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if not db.is_file():
        raise fail(f"db: {db} does not exist")
    try:
        report = pull_into_store(db, run, client, selector=selector)
    except StoreError as exc:
        raise fail(str(exc)) from None
    gpu_rows = 0
    if report.families.get("dcgm"):  # dcgm-exporter series -> gpu_samples, one row per GPU per step
        try:
            gpu_rows = convert_pulled(db, run)
        except StoreError as exc:
            raise fail(str(exc)) from None
    if json_out:
        sys.stdout.write(json.dumps({**report.as_dict(), "gpu_samples": gpu_rows}, indent=2) + "\n")
    elif report.status != "failed":
        fams = ", ".join(f"{k} {v}" for k, v in report.families.items() if v) or "none"
        make_console().print(f"{report.status}: {report.series} series, {report.samples} samples "
                             f"at {report.step_s:g} s steps (series per family: {fams})"
                             + (f"; {gpu_rows} GPU samples" if gpu_rows else ""))
        for meaning, row in report.latency.items():
            quantiles = ", ".join(
                f"{k} {row[f'{k}_s'] * 1e3:.1f} ms in ({row[f'{k}_bucket_s'][0] * 1e3:g}, "
                f"{_ms(row[f'{k}_bucket_s'][1])}] ms" for k in ("p50", "p90", "p99")
                if row.get(f"{k}_s") is not None and f"{k}_bucket_s" in row)
            make_console().print(f"server {meaning} ({row['name']}, {row['count']:.0f} "
                                 f"observations): {quantiles}")
    if report.warning:
        print_warning(report.warning)
    if report.status in ("failed", "empty"):
        raise typer.Exit(1)


def _ms(edge: float | None) -> str:
    return "+Inf" if edge is None else f"{edge * 1e3:g}"
