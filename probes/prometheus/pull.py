"""Pull a run's window from a Prometheus server into `metric_samples`.

`pull_run` never raises for anything the server does (down, slow, errors, partial or empty
answers): the run's client data is already stored and stays as it is; what went wrong is
one line in `PullReport.warning`, in the run's summary and in `prometheus_pulls`. It raises
only for a run that is not in the store (`StoreError`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from infbench.store import StoreError, get_run, open_store
from infbench.store.arrays import array
from probes.prometheus.catalog import FAMILIES, Family
from probes.prometheus.client import FATAL, PrometheusClient, PrometheusError, QueryResult
from probes.prometheus.labels import format_labels
from probes.prometheus.server_view import server_percentiles
from probes.prometheus.window import (
    Selection,
    choose_step,
    select_target,
    utc_seconds,
    wait_for_scrape,
)

SOURCE = "prometheus"


@dataclass
class PullReport:
    url: str
    status: str = "ok"  # ok | partial | empty | failed
    series: int = 0
    samples: int = 0
    queries: int = 0
    failed_queries: int = 0
    step_s: float = 0.0
    start_unix_s: float = 0.0
    end_unix_s: float = 0.0
    selector: str = ""
    families: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # The server's latency percentiles over the run, from the pulled histogram buckets.
    latency: dict[str, Any] = field(default_factory=dict)

    @property
    def warning(self) -> str | None:
        """One line for the run summary, or None when everything came back."""
        if self.status == "ok" and not self.problems:
            return None
        what = {"failed": "no server series stored",
                "empty": "no series matched the run's window",
                "partial": f"stored {self.series} series, some are missing"}.get(self.status, "")
        detail = "; ".join(dict.fromkeys(self.problems))  # each distinct problem once
        return (f"Prometheus {self.url}: {what}"
                + (f" ({detail})" if detail else "")
                + "; the run's client data is complete")

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "status": self.status, "series": self.series,
                "samples": self.samples, "step_s": self.step_s, "selector": self.selector,
                "families": self.families, "server_latency": self.latency,
                "warning": self.warning}


def _run_window(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[int, float, float, list[str]]:
    """(t0_unix_ns, start_unix_s, end_unix_s, notes) of a stored run."""
    row = con.execute("SELECT t0_unix_ns, created_at, finished_at FROM runs WHERE run_id = ?",
                      [run_id]).fetchone()
    assert row is not None
    t0_unix_ns, created, finished = row
    notes = []
    if t0_unix_ns is None:  # recorded before schema 10: the row's creation is close to t0
        t0_unix_ns = int(utc_seconds(created) * 1e9)
        notes.append("run has no t0_unix_ns (older store), window from created_at")
    end = utc_seconds(finished) if finished is not None else time.time()
    return int(t0_unix_ns), t0_unix_ns / 1e9, max(end, t0_unix_ns / 1e9), notes


def _target_urls(con: duckdb.DuckDBPyConnection, run_id: str, target_url: str | None) -> list[str]:
    """The run's target, and for a fleet run every replica (and its dcgm-exporter endpoint)."""
    urls = [target_url] if target_url else []
    row = con.execute("SELECT json_extract(config, '$.fleet.replicas') FROM runs WHERE run_id = ?",
                      [run_id]).fetchone()
    try:
        replicas = json.loads(row[0]) if row and row[0] else []
    except ValueError:
        replicas = []
    for r in replicas if isinstance(replicas, list) else []:
        if isinstance(r, dict):
            urls += [str(r[k]) for k in ("url", "gpu_metrics_url") if r.get(k)]
    return list(dict.fromkeys(urls))


def _query(family: Family, sel: Selection) -> str | None:
    matchers = sel.target if family.scope == "target" else sel.host
    if matchers is None:
        return None
    return "{" + f'__name__=~"{family.match}"' + (f", {matchers}" if matchers else "") + "}"


def _rows(result: QueryResult, t0_unix_ns: int) -> tuple[dict[str, list[Any]], int]:
    cols: dict[str, list[Any]] = {"t_ns": [], "name": [], "labels": [], "value": []}
    for s in result.series:
        labels = format_labels(s.labels)
        for t, v in s.values:
            cols["t_ns"].append(round(t * 1e9) - t0_unix_ns)
            cols["name"].append(s.name)
            cols["labels"].append(labels)
            cols["value"].append(v)
    return cols, len(result.series)


def pull_run(con: duckdb.DuckDBPyConnection, run_ref: str, client: PrometheusClient, *,
             selector: str | None = None, step_s: float | None = None,
             wait_s: float = 0.0) -> PullReport:
    """Range-query the run's window for every family into `metric_samples` (source
    'prometheus'), replacing an earlier pull's samples; record the pull; note it in the
    run's summary. `wait_s` bounds the wait for a scrape after the run's end."""
    run = get_run(con, run_ref)  # StoreError for an unknown run
    report = PullReport(url=client.url)
    t0_unix_ns, start, end, notes = _run_window(con, run.run_id)
    report.problems.extend(notes)
    try:
        sel = select_target(client, _target_urls(con, run.run_id, run.target_url), selector)
    except PrometheusError as exc:  # down, slow, refused TLS: nothing more to ask it
        report.queries = report.failed_queries = 1
        report.problems.append(f"{exc.kind}: {exc}")
        report.status = "failed"
        _store(con, run.run_id, report, [])
        return report
    report.selector = sel.target
    if not sel.target and not selector:
        report.problems.append(sel.how + "; series chosen by model_name, GPU and node series "
                                         "skipped (pass a selector)")
        # json.dumps writes a double-quoted string with the escapes PromQL reads the same way.
        sel = Selection(f"model_name={json.dumps(run.model)}" if run.model else "", None,
                        sel.how, [])
        report.selector = sel.target
    # The targets' scrape interval sets the step; with wait_s > 0 (just after a run), also
    # wait for their first scrape after the run's end.
    interval = wait_for_scrape(client, sel, end, wait_s) if sel.targets else None
    step = step_s or choose_step(max(end - start, 1.0), interval)
    start -= step  # the counters' values just before the run
    end += step + (interval or 0.0)  # and once more after its last scrape
    report.step_s, report.start_unix_s, report.end_unix_s = step, start, end
    collected: list[dict[str, list[Any]]] = []
    for family in FAMILIES:
        query = _query(family, sel)
        if query is None:
            continue
        report.queries += 1
        try:
            result = client.query_range(query, start, end, step)
        except PrometheusError as exc:
            report.failed_queries += 1
            report.problems.append(f"{exc.kind}: {exc}")
            if exc.kind in FATAL:
                break  # the server cannot be used: no point asking again
            continue
        report.problems.extend(f"server warning: {w}" for w in result.warnings)
        cols, n = _rows(result, t0_unix_ns)
        report.families[family.name] = n
        report.series += n
        report.samples += len(cols["t_ns"])
        collected.append(cols)
    if report.failed_queries == report.queries:
        report.status = "failed"
    elif report.series == 0:
        report.status = "empty"
        report.problems.append(f"selected by {sel.how}")
    elif report.failed_queries or any(p.startswith("server warning") for p in report.problems):
        report.status = "partial"
    _store(con, run.run_id, report, collected)
    return report


def _store(con: duckdb.DuckDBPyConnection, run_id: str, report: PullReport,
           collected: list[dict[str, list[Any]]]) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        if report.status != "failed":  # a failed pull keeps what an earlier one stored
            con.execute("DELETE FROM metric_samples WHERE run_id = ? AND source = ?",
                        [run_id, SOURCE])
        for cols in collected:
            if not cols["t_ns"]:
                continue
            n = len(cols["t_ns"])
            batch = pa.table({"run_id": array([run_id] * n, pa.string()),
                              "t_ns": array(cols["t_ns"], pa.int64()),
                              "source": array([SOURCE] * n, pa.string()),
                              "name": array(cols["name"], pa.string()),
                              "labels": array(cols["labels"], pa.string()),
                              "value": array(cols["value"], pa.float64())})
            con.register("_prom_batch", batch)
            try:
                con.execute("INSERT INTO metric_samples (run_id, t_ns, source, name, labels, value) "
                            "SELECT run_id, t_ns, source, name, labels, value FROM _prom_batch")
            finally:
                con.unregister("_prom_batch")
        if report.status != "failed":
            report.latency = server_percentiles(con, run_id)
        idx = con.execute("SELECT coalesce(max(pull_idx) + 1, 0) FROM prometheus_pulls "
                          "WHERE run_id = ?", [run_id]).fetchone()
        con.execute(
            "INSERT INTO prometheus_pulls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, idx[0] if idx else 0, datetime.now(UTC).replace(tzinfo=None), report.url,
             report.selector, report.start_unix_s, report.end_unix_s, report.step_s,
             report.queries, report.failed_queries, report.series, report.samples,
             report.status, json.dumps(list(dict.fromkeys(report.problems))),
             json.dumps(report.families)])
        _note_in_summary(con, run_id, report)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _note_in_summary(con: duckdb.DuckDBPyConnection, run_id: str, report: PullReport) -> None:
    """The run's summary gains `prometheus` and, when something went wrong, one warning
    (an earlier pull's warning is replaced, not repeated)."""
    row = con.execute("SELECT summary FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None or row[0] is None:
        return
    try:
        summary = json.loads(row[0])
    except ValueError:
        raise StoreError(f"run {run_id}: its stored summary is not JSON") from None
    old = (summary.get("prometheus") or {}).get("warning")
    warnings = [w for w in summary.get("warnings") or [] if w != old]
    if report.warning:
        warnings.append(report.warning)
    summary["warnings"] = warnings
    summary["prometheus"] = report.as_dict()
    con.execute("UPDATE runs SET summary = ? WHERE run_id = ?",
                [json.dumps(summary, sort_keys=True), run_id])


def pull_into_store(db: str | Path, run_ref: str, client: PrometheusClient, *,
                    selector: str | None = None, wait_s: float = 0.0) -> PullReport:
    """`pull_run` on a store file: opens it, pulls, closes it (StoreError for the store)."""
    con = open_store(db)
    try:
        return pull_run(con, run_ref, client, selector=selector, wait_s=wait_s)
    except duckdb.Error as exc:  # a damaged or locked file: one line, like the store's own
        raise StoreError(f"{db}: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
