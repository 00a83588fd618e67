"""Link probe charts: bus bandwidth against message size per collective, and the pair matrix.

Read from the store only (`link_probes`, `collectives`): a probe measured here and an
imported nccl-tests output draw the same way. Each point is the median over the probe's
repeats; an import's in-place half is its own series. Used by the run report (probes linked
to the run) and by `links_page` (one probe on its own page).
"""

from __future__ import annotations

import html
import json

import duckdb
import numpy as np

from infbench.report import charts
from infbench.report.charts import Axis, Chart, Series

SIZE = Axis("message size (nccl-tests' size: the largest buffer per rank)", "KiB", log=True)
BUSBW = Axis("bus bandwidth (nccl-tests' busbw)", "GB/s")


def probe_charts(con: duckdb.DuckDBPyConnection, probe_id: str) -> list[Chart]:
    meta = con.execute("SELECT source, world_size, backend, path FROM link_probes WHERE probe_id = ?",
                       [probe_id]).fetchone()
    if meta is None:
        return []
    source, world, backend, path = meta
    rows = con.execute(
        "SELECT op, in_place, bytes, median(busbw_gbps) FROM collectives WHERE probe_id = ? "
        "AND phase IN ('sweep', 'import') AND bytes > 0 GROUP BY ALL ORDER BY op, in_place, bytes",
        [probe_id]).fetchall()
    imported = source == "nccl-tests"
    series: dict[str, tuple[list[float], list[float]]] = {}
    for op, in_place, nbytes, bus in rows:
        name = f"{op} ({'in-place' if in_place else 'out-of-place'})" if imported else op
        xs, ys = series.setdefault(name, ([], []))
        xs.append(nbytes / 1024)
        ys.append(float("nan") if bus is None else bus)
    where = f"nccl-tests output {path}" if imported else f"{world} ranks on {backend}"
    chart = Chart(f"Bus bandwidth by message size: probe {probe_id} ({where})", SIZE, [BUSBW],
                  [Series(n, np.array(x), np.array(y), markers=True) for n, (x, y) in series.items()],
                  note="busbw = size / time x nccl-tests' factor (all-reduce 2(n-1)/n; all-gather, "
                       "reduce-scatter, all-to-all (n-1)/n; broadcast, send/recv 1); median of the repeats.",
                  wide=True)
    if not series:
        chart.empty = "no sized measurements in this probe"
    out = [chart]
    pairs = con.execute(
        "SELECT src_rank, dst_rank, median(busbw_gbps) FROM collectives WHERE probe_id = ? AND phase = 'pairwise' "
        "GROUP BY ALL ORDER BY src_rank, dst_rank", [probe_id]).fetchall()
    if pairs:
        idx = np.arange(len(pairs), dtype=float)
        out.append(Chart(f"Point-to-point bandwidth per pair: probe {probe_id}", Axis("pair", "pair"), [BUSBW],
                         [Series("send/recv busbw", idx, np.array([p[2] for p in pairs], float), style="bars")],
                         note="Each pair exchanged the same message both ways at once, one pair at a time; "
                              "a slow rank lowers every pair it is in, a slow link one pair.",
                         point_names=[f"{a}-{b}" for a, b, _ in pairs]))
    return out


def run_link_charts(con: duckdb.DuckDBPyConnection, run_id: str) -> list[Chart]:
    """Charts of the link probes linked to a run (`--run`), oldest first."""
    ids = [r[0] for r in con.execute("SELECT probe_id FROM link_probes WHERE run_id = ? ORDER BY created_at",
                                     [run_id]).fetchall()]
    return [c for pid in ids for c in probe_charts(con, pid)]


def links_page(con: duckdb.DuckDBPyConnection, probe_id: str) -> str:
    """One self-contained page for one probe: its verdicts, the plots, its configuration."""
    row = con.execute("SELECT created_at, source, world_size, backend, hostname, config, verdict, notes "
                      "FROM link_probes WHERE probe_id = ?", [probe_id]).fetchone()
    if row is None:
        raise KeyError(probe_id)
    created, source, world, backend, host, config, verdict, notes = row
    e = html.escape
    parts = [f"<h1>infbench link probe {e(probe_id)}</h1><p>{e(str(source))} · {world or '?'} ranks · "
             f"{e(str(backend or ''))} · {e(str(host or ''))} · {e(str(created))}</p>"]
    v = json.loads(verdict) if verdict else {}
    for key, label in (("bisect", "Slow-rank bisection"), ("pairwise", "Pair matrix")):
        if v.get(key):
            parts.append(f"<p><b>{label}:</b> {e(v[key]['status'])}: {e(v[key]['message'])}</p>")
    for n in json.loads(notes or "[]"):
        parts.append(f"<p class='note'>{e(n)}</p>")
    cfg = e(json.dumps(json.loads(config or "{}"), indent=2, sort_keys=True))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>infbench {e(probe_id)}</title>"
            f"<style>body{{font-family:sans-serif;margin:20px 24px}}pre{{font-size:11px;background:#f6f6f6;"
            f"padding:8px}}</style>{charts.page_head()}</head><body>{''.join(parts)}"
            f"{charts.render(probe_charts(con, probe_id))}<h2>Configuration</h2><pre>{cfg}</pre></body></html>")
