"""The dilution from Python: plan, re-run through a runner the caller gives, analyse, a DataFrame.

    from infbench.pipeline.replay import replay_runner
    from playbooks.dilution import measure_dilution
    df = measure_dilution("infbench.duckdb", "BENCH", "PROD",
                          runner=replay_runner("infbench.duckdb", "http://127.0.0.1:8000"),
                          requests=60, seconds=20)

A runner takes a recipe (`plan.recipe`) and returns the id of the run it stored in the same
store; `runner=None` analyses matched strata only. Stores are opened only while read, so the
runner can write between.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infbench.store import get_run, open_store
from infbench.store.transfer import export_run, import_run
from playbooks.dilution.metrics import UNITS
from playbooks.dilution.plan import Budget, Plan, make_plan, recipes
from playbooks.dilution.playbook import DilutionOptions, check_pair, diagnose_dilution, frame
from playbooks.dilution.properties import profile
from playbooks.findings import Diagnosis

Runner = Callable[[dict[str, Any]], str]
DEFAULT_MAX_REQUESTS = 200


def copy_run(source_db: Path, ref: str, db: Path) -> str:
    """Copy a run from another store into `db` (as `infbench export`/`import` would), unless
    `db` holds it already; its run id."""
    src = open_store(source_db, read_only=True)
    try:
        run_id = get_run(src, ref).run_id
        con = open_store(db)
        try:
            if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
                return run_id
            with tempfile.TemporaryDirectory() as tmp:
                export_run(src, run_id, Path(tmp), "parquet")
                import_run(con, tmp)
        finally:
            con.close()
    finally:
        src.close()
    return run_id


def plan_dilution(db: Path | str, bench: str, prod: str, *, prod_db: Path | str | None = None,
                  attribution: str = "one-at-a-time", requests: int | None = None,
                  seconds: float = 30.0, repeats: int = 1) -> Plan:
    """Both runs measured (the production run from `prod_db` where given) and the re-runs
    chosen; nothing is sent or written."""
    con = open_store(Path(db), read_only=True)
    try:
        b = profile(con, bench)
        if prod_db is None:
            p = profile(con, prod)
    finally:
        con.close()
    if prod_db is not None:
        other = open_store(Path(prod_db), read_only=True)
        try:
            p = profile(other, prod)
        finally:
            other.close()
    check_pair(b, p)
    if requests is None:  # as many as the runs sent, so a re-run's start weighs as theirs did
        requests = min(DEFAULT_MAX_REQUESTS, max(b.requests, p.requests))
    return make_plan(b, p, attribution, Budget(requests, seconds, repeats))


def rerun(plan: Plan, runner: Runner, progress: Callable[[str], None] | None = None,
          seed: int = 0) -> str:
    """Send every re-run of the plan through `runner`; the session id they are tagged with."""
    session = uuid.uuid4().hex[:12]
    todo = recipes(plan, session, seed)
    for k, r in enumerate(todo, start=1):
        if progress is not None:
            progress(f"re-run {k}/{len(todo)}: {r['name']} (repeat {r['tags']['dilution']['repeat'] + 1}), "
                     f"{len(r['rows'])} requests, at most {r['duration_s']:g} s")
        runner(r)
    return session


def analyse(db: Path | str, bench: str, prod: str, options: DilutionOptions) -> Diagnosis:
    con = open_store(Path(db), read_only=True)
    try:
        return diagnose_dilution(con, bench, DilutionOptions(
            prod=prod, metric=options.metric, session=options.session, no_rerun=options.no_rerun))
    finally:
        con.close()


def measure_dilution(db: Path | str, bench: str, prod: str, *, runner: Runner | None,
                     metric: str = "throughput", attribution: str = "one-at-a-time",
                     requests: int | None = None, seconds: float = 30.0, repeats: int = 1) -> Any:
    """Plan, re-run (unless `runner` is None: matched strata), analyse: the attribution as a
    pandas DataFrame (metric, part, kind, value, uncertainty, share_of_gap, ...)."""
    options = DilutionOptions(prod=prod, metric=metric, no_rerun=runner is None)
    options.validate()
    plan = plan_dilution(db, bench, prod, attribution=attribution, requests=requests,
                         seconds=seconds, repeats=repeats)
    if runner is not None and plan.configs:
        options.session = rerun(plan, runner)
    elif runner is not None:
        options.no_rerun = True
    return frame(analyse(db, plan.bench.run_id, plan.prod.run_id, options))


def table_lines(diag: Diagnosis) -> list[str]:
    """The attribution of every metric, a line per part (the headline metric first)."""
    ctx = diag.context
    order = [ctx["metric"], *(m for m in UNITS if m != ctx["metric"])]
    out = [f"dilution by {ctx['method']}" + (f" (session {ctx['session']})" if ctx.get("session") else "")]
    for m in order:
        rows = [r for r in ctx["table"] if r["metric"] == m]
        if not rows:
            continue
        out.append(f"  {m} ({UNITS[m]}): benchmark {ctx['metrics']['bench'][m]:,.4g}, "
                   f"production {ctx['metrics']['prod'][m]:,.4g}")
        for r in rows:
            share = "" if r["share_of_gap"] is None else f"  {r['share_of_gap']:>7.0%}"
            indent = "      " if r["kind"] == "detail" else "    "
            out.append(f"{indent}{r['part']:<18} {r['value']:>+12,.4g} ± {r['uncertainty']:<10,.3g}{share}")
    return out
