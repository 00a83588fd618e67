"""`infbench run`: load-test an OpenAI-compatible endpoint (the bundled engine by default)."""

from __future__ import annotations

import json
import sys

import typer

from infbench.command_support import fail
from infbench.console import make_console, print_warning
from infbench.loadgen.local_engine import target_url
from infbench.loadgen.preflight import PreflightError
from infbench.loadgen.run.outcome import EXIT_CODES_HELP, exit_code
from infbench.options.groups import grouped
from infbench.options.measured import (
    ArrivalOptions,
    LoadOptions,
    RunOutputOptions,
    RunTelemetryOptions,
    ScaleOptions,
    TargetOptions,
    WorkloadOptions,
    run_request,
)
from infbench.pipeline.record import prepare_run, record_run
from infbench.report.live import live_progress
from infbench.report.terminal import print_summary
from infbench.store import StoreError


@grouped
def run(target: TargetOptions, workload: WorkloadOptions, arrival: ArrivalOptions,
        load: LoadOptions, telemetry: RunTelemetryOptions, scale: ScaleOptions,
        output: RunOutputOptions) -> None:
    """Load-test a target and record every request and chunk in the store."""
    console = make_console(stderr=True)
    try:
        request = run_request(target, workload, arrival, load, telemetry, scale, output)
    except ValueError as exc:
        raise fail(str(exc)) from None

    def warn(line: str) -> None:
        print_warning(line, console)

    try:
        with target_url(request.target.first_url, request.target.engine_args, console) as base:
            try:
                prepared = prepare_run(request, base, warn)
            except (PreflightError, ValueError) as exc:
                raise fail(str(exc)) from None
            progress = None if output.quiet else (lambda st, s: live_progress(st, s, console))
            result = record_run(prepared, warn, progress)
    except (StoreError, PreflightError) as exc:
        raise fail(str(exc)) from None

    summary = result.summary
    if output.json_out:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    else:
        print_summary(make_console(), summary, {"run_id": result.run_id, "status": result.status.status,
                                           "model": prepared.settings.model,
                                           "target_url": prepared.settings.url})
        make_console().print(f"stored in {output.db} as run {result.run_id}", style="dim", markup=False)
    code = exit_code(result.status, summary["completed"], max_error_rate=output.max_error_rate,
                     signalled=result.signal_name is not None)
    if code:
        raise typer.Exit(code)


run.__doc__ = f"{run.__doc__}\n\n{EXIT_CODES_HELP}"
