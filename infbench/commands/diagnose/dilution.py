"""`infbench diagnose dilution BENCH_RUN PROD_RUN`: the benchmark's re-runs with production's
properties swapped in, then the gap split into them (playbooks/dilution)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from infbench.command_support import fail
from infbench.commands.diagnose.session import DB, JSON_OUT, SAVE, SQL, diagnose_and_save, validated
from infbench.commands.diagnose.show import print_diagnosis
from infbench.console import make_console, print_warning
from infbench.loadgen.preflight import PreflightError
from infbench.pipeline.replay import replay_runner
from infbench.store import StoreError
from playbooks.dilution import DilutionOptions, diagnose_dilution, plan_dilution, rerun, table_lines
from playbooks.dilution.api import copy_run
from playbooks.dilution.metrics import METRICS
from playbooks.dilution.plan import ATTRIBUTIONS


def dilution(
    bench_run: str = typer.Argument(..., help="The benchmark run: id, unique prefix or 'last'."),
    prod_run: str = typer.Argument(..., help="The production run (or a replay of its trace)."),
    db: Path = DB,
    prod_db: Path | None = typer.Option(None, "--prod-db", help="The store holding the production run, "
                                        "when not --db: the run is copied into --db first."),
    url: str | None = typer.Option(None, help="Target of the re-runs (default: the benchmark run's URL)."),
    requests: int | None = typer.Option(None, "--requests", help="Budget: requests per re-run "
                                        "(default: as many as the larger run sent, at most 200)."),
    seconds: float = typer.Option(30.0, "--seconds", help="Budget: seconds of sending per re-run."),
    repeats: int = typer.Option(1, "--repeats", help="Runs per configuration (their spread is the uncertainty)."),
    attribution: str = typer.Option("one-at-a-time", "--attribution",
                                    help=f"{' or '.join(ATTRIBUTIONS)} (every subset: 2^K re-runs)."),
    metric: str = typer.Option("throughput", "--metric", help=f"Headline metric: {', '.join(METRICS)}."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the measured properties and the "
                                 "re-runs with their budget; send nothing."),
    no_rerun: bool = typer.Option(False, "--no-rerun", help="Matched strata of the two runs only "
                                  "(per-request metrics: --metric ttft_ms or tpot_ms)."),
    session: str | None = typer.Option(None, "--session", help="Analyse this earlier session's "
                                       "re-runs again; send nothing."),
    api_key: str | None = typer.Option(None, envvar="OPENAI_API_KEY", show_envvar=True,
                                       help="Bearer key for the re-runs' target (never stored)."),
    json_out: bool = JSON_OUT,
    sql: bool = SQL,
    save: bool = SAVE,
) -> None:
    """Why production sees less than the benchmark: the benchmark re-run against the same target
    with one production property swapped in at a time (input and output lengths, prefix share,
    concurrency and burstiness, sampling, structured output), and all of them, within a budget
    printed before anything is sent; the gap in throughput, TTFT and TPOT split into those parts
    and the interaction left over, each with its uncertainty and the SQL behind it (runbook:
    playbooks/dilution/dilution.md). Exit 0 diagnosed (or planned, with --dry-run), 2 bad input:
    an unknown run, runs of different models, a target that does not answer."""
    options = validated(DilutionOptions(prod=prod_run, metric=metric, session=session, no_rerun=no_rerun))
    console = make_console(stderr=json_out)
    try:
        plan = plan_dilution(db, bench_run, prod_run, prod_db=prod_db, attribution=attribution,
                             requests=requests, seconds=seconds, repeats=repeats)
        if prod_db is not None and not dry_run:
            copy_run(prod_db, plan.prod.run_id, db)
    except (StoreError, ValueError) as exc:
        raise fail(str(exc)) from None
    target = url or plan.bench.url
    if session is None and not no_rerun:
        for line in plan.describe(target):
            console.print(line, markup=False)
    if dry_run:
        return
    if session is None and not no_rerun and plan.configs:
        if not target:
            raise fail("url: the benchmark run recorded no URL (the bundled engine): start a target "
                       "and pass --url")
        runner = replay_runner(db, target, api_key=api_key, warn=lambda line: print_warning(line, console))
        try:
            options.session = rerun(plan, runner, lambda line: console.print(line, style="dim", markup=False))
        except PreflightError as exc:
            raise fail(f"url: {str(exc).splitlines()[0]} (the re-runs need the target up: start it "
                       "and pass --url)") from None
        except (StoreError, ValueError) as exc:
            raise fail(str(exc)) from None
    elif session is None and not plan.configs:
        options.no_rerun = True
    options.prod = plan.prod.run_id
    diag, saved, not_saved = diagnose_and_save(
        lambda con: diagnose_dilution(con, plan.bench.run_id, options), lambda d: [d], db, save)
    if not_saved is not None:
        print_warning(f"findings diagnosed but not saved: {not_saved.splitlines()[0]}")
    if json_out:
        sys.stdout.write(json.dumps(diag.to_dict(), indent=2, default=str) + "\n")
        return
    for line in table_lines(diag):
        console.print(line, markup=False)
    print_diagnosis(console, diag, sql)
    if saved is not None:
        console.print(f"saved {saved} finding(s) to {db}", style="dim", markup=False)
