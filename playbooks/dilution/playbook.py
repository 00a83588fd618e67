"""Playbook `dilution`: why production sees less than the benchmark, split into measured parts.

Order: both runs' traffic measured property by property (`properties`) -> the re-runs of a
session found by their tags (`plan` made them; the command sent them), or, with none or
`--no-rerun`, matched strata (`strata`) -> each metric's gap split into parts and the
interaction left over (`attribution`) -> the verdict: the part that makes most of the gap in
the headline metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from playbooks.dilution.attribution import BENCH, PROD, Figure, Key, evaluate, rows
from playbooks.dilution.findings import verdict_finding
from playbooks.dilution.metrics import METRICS, METRICS_SQL, RunMetrics, run_metrics
from playbooks.dilution.plan import ATTRIBUTIONS, config_name, differences
from playbooks.dilution.properties import PROPERTIES, RunProfile, profile
from playbooks.dilution.strata import matched_strata
from playbooks.findings import Diagnosis
from playbooks.sql import fetch, render

PER_REQUEST = ("ttft_ms", "tpot_ms")

SESSION_SQL = """
SELECT run_id, json_extract_string(config, '$.dilution.session') AS session,
       json_extract_string(config, '$.dilution.attribution') AS attribution,
       CAST(json_extract(config, '$.dilution.swapped') AS VARCHAR[]) AS swapped,
       CAST(json_extract(config, '$.dilution.repeat') AS INTEGER) AS repeat
FROM runs
WHERE json_extract_string(config, '$.dilution.bench') = $bench
  AND json_extract_string(config, '$.dilution.prod') = $prod
  AND status IN ('completed', 'completed_with_errors')
ORDER BY created_at
"""


@dataclass
class DilutionOptions:
    prod: str = field(default="", metadata={"help": "The production run (or a replay of its trace)."})
    metric: str = field(default="throughput", metadata={
        "help": f"Headline metric the verdict is about: {', '.join(METRICS)}."})
    session: str | None = field(default=None, metadata={
        "help": "The re-runs of this session (default: the latest for this pair of runs)."})
    no_rerun: bool = field(default=False, metadata={
        "help": "Matched strata of the two runs only, whatever re-runs the store holds."})

    def validate(self) -> None:
        if not self.prod.strip():
            raise ValueError("prod: give the production run (id, unique prefix or 'last')")
        if self.metric not in METRICS:
            raise ValueError(f"metric: {self.metric!r} is not one of {', '.join(METRICS)}")


def check_pair(bench: RunProfile, prod: RunProfile) -> None:
    """The refusals: one run twice, or two models (a dilution compares one model's traffic)."""
    if bench.run_id == prod.run_id:
        raise ValueError(f"runs: benchmark and production are the same run ({bench.run_id})")
    if bench.model and prod.model and bench.model != prod.model:
        raise ValueError(f"runs against different models: benchmark {bench.run_id} ran "
                         f"{bench.model!r}, production {prod.run_id} ran {prod.model!r}; "
                         "a dilution compares one model's traffic")


def profiles(con: duckdb.DuckDBPyConnection, bench_ref: str, prod_ref: str) -> tuple[RunProfile, RunProfile]:
    bench, prod = profile(con, bench_ref), profile(con, prod_ref)
    check_pair(bench, prod)
    return bench, prod


@dataclass
class Session:
    session: str
    attribution: str
    runs: dict[frozenset[str], list[str]]   # swapped set -> run ids (one per repeat)
    sql: str


def find_session(con: duckdb.DuckDBPyConnection, bench: str, prod: str, session: str | None) -> Session | None:
    """The re-runs of `session` (default: the latest) for this pair; None when there are none."""
    sql, found = fetch(con, SESSION_SQL, bench=bench, prod=prod)
    if session is not None:
        found = [r for r in found if r[1] == session or r[1].startswith(session)]
        if not found:
            raise ValueError(f"session {session!r}: no re-runs of benchmark {bench} against production {prod}")
    if not found:
        return None
    sid = found[-1][1]
    runs: dict[frozenset[str], list[str]] = {}
    method = "one-at-a-time"
    for run_id, s, attribution, swapped, _ in found:
        if s == sid:
            runs.setdefault(frozenset(swapped or []), []).append(str(run_id))
            method = str(attribution)
    if method not in ATTRIBUTIONS:
        raise ValueError(f"session {sid}: attribution {method!r} is not one of {', '.join(ATTRIBUTIONS)}")
    return Session(sid, method, runs, sql.replace("ORDER BY", f"  AND json_extract_string(config, "
                                                   f"'$.dilution.session') = '{sid}'\nORDER BY"))


def _rerun_figures(con: duckdb.DuckDBPyConnection, sess: Session, bm: RunMetrics, pm: RunMetrics,
                   differing: tuple[str, ...]) -> tuple[dict[str, list[Figure]], dict[str, dict[str, Any]]]:
    values: dict[str, dict[Key, float]] = {m: {BENCH: bm.value[m], PROD: pm.value[m]} for m in METRICS}
    variances: dict[str, dict[Key, float]] = {m: {BENCH: float(np.var(bm.spread[m], ddof=1)),
                                                  PROD: float(np.var(pm.spread[m], ddof=1))} for m in METRICS}
    per_config: dict[str, dict[str, Any]] = {}
    for swapped, run_ids in sess.runs.items():
        measured = [run_metrics(con, r) for r in run_ids]
        name = config_name(swapped, differing)
        per_config[name] = {"runs": run_ids, "sql": measured[0].sql}
        for m in METRICS:
            xs = np.array([x.value[m] for x in measured])
            values[m][swapped] = float(xs.mean())
            # Repeats: their own spread; one run: its requests' bootstrap spread.
            variances[m][swapped] = (float(xs.var(ddof=1)) / len(xs) if len(xs) > 1
                                     else float(np.var(measured[0].spread[m], ddof=1)))
            per_config[name][m] = round(float(xs.mean()), 4)
    table = rows(differing, sess.attribution)
    return {m: evaluate(table, values[m], variances[m]) for m in METRICS}, per_config


def _strata_figures(bench: RunProfile, prod: RunProfile, differing: list[str],
                    bm: RunMetrics, pm: RunMetrics) -> tuple[dict[str, list[Figure]], list[str]]:
    out: dict[str, list[Figure]] = {}
    split: list[str] = []
    for m in PER_REQUEST:
        out[m], split = matched_strata(bench, prod, differing, bench.per_request[m], prod.per_request[m])
    for m in METRICS:
        if m not in out:  # a run-level metric: its gap only, the rest left over
            gap = pm.value[m] - bm.value[m]
            unc = 1.959964 * float(np.sqrt(np.var(bm.spread[m], ddof=1) + np.var(pm.spread[m], ddof=1)))
            out[m] = [Figure("gap", "gap", gap, unc), Figure("interaction", "interaction", gap, unc)]
    return out, split


def table_rows(figures: dict[str, list[Figure]], bm: RunMetrics, method: str) -> list[dict[str, Any]]:
    """The attribution as rows (metric, part, kind, value, uncertainty, share of the gap)."""
    out = []
    for m, figs in figures.items():
        gap = figs[0].value
        for f in figs:
            out.append({"metric": m, "part": f.name, "kind": f.kind, "value": round(f.value, 6),
                        "uncertainty": round(f.uncertainty, 6),
                        "share_of_gap": round(f.value / gap, 4) if gap else None,
                        "benchmark_value": round(bm.value[m], 6), "method": method})
    return out


def diagnose_dilution(con: duckdb.DuckDBPyConnection, bench_ref: str,
                      options: DilutionOptions | None = None) -> Diagnosis:
    opts = options or DilutionOptions()
    opts.validate()
    bench, prod = profiles(con, bench_ref, opts.prod)
    differing, not_swapped = differences(bench, prod)
    bm, pm = run_metrics(con, bench.run_id), run_metrics(con, prod.run_id)
    sess = None if opts.no_rerun else find_session(con, bench.run_id, prod.run_id, opts.session)
    if sess is None and opts.metric not in PER_REQUEST:
        raise ValueError(f"metric: {opts.metric} is a whole-run figure that matched strata cannot split: "
                         f"re-run (without --no-rerun) or take --metric {' or '.join(PER_REQUEST)}")
    per_config: dict[str, dict[str, Any]] = {}
    if sess is not None:
        swapped_sets = set(sess.runs)
        differing = [p for p in PROPERTIES if any(p in s for s in swapped_sets)]
        figures, per_config = _rerun_figures(con, sess, bm, pm, tuple(differing))
        method = f"re-runs, {sess.attribution}"
        split = differing
    else:
        figures, split = _strata_figures(bench, prod, differing, bm, pm)
        method = "matched strata (no re-run)"
    diag = Diagnosis("dilution", bench.run_id, {"requests": True, "reruns": sess is not None})
    diag.context = {
        "bench": bench.run_id, "prod": prod.run_id, "metric": opts.metric, "method": method,
        "session": sess.session if sess else None, "differing": differing, "split": split,
        "not_swapped": not_swapped, "configs": per_config,
        "metrics": {"bench": bm.value, "prod": pm.value},
        "table": table_rows(figures, bm, method),
    }
    diag.context["evidence_sql"] = {"metrics": render(METRICS_SQL, run_id="RUN_ID"),
                                    **({"session": sess.sql} if sess else {})}
    diag.findings.append(verdict_finding(bench, prod, figures[opts.metric], opts.metric, method,
                                         bm, pm, per_config, sess.sql if sess else None))
    for name, why in not_swapped.items():
        if why.startswith("not measured"):
            diag.notes.append(f"{name}: {why}")
    if sess is None:
        left = [p for p in differing if p not in split]
        if left:
            diag.notes.append(f"without re-runs, {', '.join(left)} cannot be split from the rest: "
                              "they are in the interaction (run `infbench diagnose dilution` with a "
                              "budget to measure them)")
    return diag


def frame(diag: Diagnosis) -> Any:
    """The attribution table as a pandas DataFrame (needs pandas: the `analysis` extra)."""
    import pyarrow as pa
    return pa.Table.from_pylist(diag.context["table"]).to_pandas()
