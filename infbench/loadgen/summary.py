"""The summary of a run, computed from the store (so `show` and `report` agree with `run`).

Key names follow vLLM's benchmark result JSON where the meaning is the same (`completed`,
`request_throughput`, `mean_ttft_ms`, `p99_itl_ms`, `p99.9_e2el_ms`, ...). Latencies are in
ms over requests of the `measure` phase that finished without error; `*_intended_*` keys
measure from the intended send time (the arrival schedule) instead of the actual one.
e2e and TPOT end at the last event that carries choices (the store's `request_latency`);
`*_trailing_ms` is how long usage/`[DONE]` came after it. `*_itl_ms` spread each socket read's
gap over the content events it delivered (the store's `itl` view), `raw_*_itl_ms` are the
per-event gaps, 0 ms inside a read, as vLLM reports them.
Goodput counts a request only when every SLO holds for it, with TTFT and e2e measured from
the intended send, so a client that fell behind cannot flatter the result.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from infbench.loadgen.tenant_summary import tenant_sections
from infbench.slo import slo_condition_sql

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)

# Thresholds for calling a run client-bound (documented in the summary it produces).
CPU_BOUND_PERCENT = 90.0
LOOP_LAG_MEDIAN_MS = 10.0
LOOP_LAG_MAX_MS = 250.0
SCHEDULE_LAG_P99_MS = 10.0
COALESCED_WARN_FRACTION = 0.01
# Usage/[DONE] this long after the last event with choices (typically, or at p99) is a finding.
TRAILING_WARN_MEDIAN_MS = 20.0
TRAILING_WARN_P99_MS = 200.0


def _pkey(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


_OK = "phase = 'measure' AND error_class IS NULL"


def _stats(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any], name: str) -> dict[str, float | None]:
    qs = [p / 100 for p in PERCENTILES]
    row = con.execute(
        f"SELECT avg(x), median(x), stddev_pop(x), quantile_cont(x, {qs}), count(x), max(x) "
        f"FROM ({sql}) WHERE x IS NOT NULL",
        params,
    ).fetchone()
    assert row is not None
    out: dict[str, float | None] = {
        f"mean_{name}_ms": row[0], f"median_{name}_ms": row[1], f"std_{name}_ms": row[2],
    }
    for p, v in zip(PERCENTILES, row[3] or [None] * len(PERCENTILES), strict=True):
        out[f"p{_pkey(p)}_{name}_ms"] = v
    out[f"max_{name}_ms"] = row[5]
    return out


# ITL statistics are built from histograms at 1 us resolution, filled a slice of requests at a
# time: the window over every chunk of a run (and an exact quantile over every gap) would
# need memory in proportion to the run's length. Slices hold about this many chunks.
ITL_SLICE_CHUNKS = 500_000

# Per slice: the content events grouped by the read that delivered them, each read's gap since
# the previous content read of its request (NULL for the first), and from those, histogram
# rows for both definitions (kind 0: spread, kind 1: raw). A read of n events after a gap g
# gives n spread values g/n (the store's `itl.itl_ms`); as per-event gaps (`itl.raw_itl_ms`)
# it gives one g and n - 1 zeros, and the first read n - 1 zeros. Events of one read share
# its stamp, so nothing finer is lost by grouping them first.
_ITL_SLICE_SQL = """
WITH ok AS (SELECT request_idx FROM requests
            WHERE run_id = $run AND phase = 'measure' AND error_class IS NULL
              AND request_idx >= $a AND request_idx < $b),
     reads AS (SELECT request_idx, read_idx, max(t_ns) AS t, count(*) AS n
               FROM chunks SEMI JOIN ok USING (request_idx)
               WHERE run_id = $run AND content AND request_idx >= $a AND request_idx < $b
               GROUP BY request_idx, read_idx),
     gaps AS (SELECT n, t - lag(t) OVER (PARTITION BY request_idx ORDER BY read_idx) AS g FROM reads)
SELECT 0, CAST(round(g / n / 1e3) AS BIGINT), sum(n), sum(g) / 1e6, sum(g::DOUBLE * g / n) / 1e12, max(g / n)
FROM gaps WHERE g IS NOT NULL GROUP BY 2
UNION ALL
SELECT 1, CAST(round(g / 1e3) AS BIGINT), count(*), sum(g) / 1e6, sum(g::DOUBLE * g) / 1e12, max(g)
FROM gaps WHERE g IS NOT NULL GROUP BY 2
UNION ALL
SELECT 1, 0, sum(n - 1), 0.0, 0.0, 0.0 FROM gaps HAVING sum(n - 1) > 0
"""


class _Histogram:
    """Counts per 1 us value plus exact sums, merged across slices."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n, self.total, self.total_sq = 0, 0.0, 0.0
        self.top: float | None = None

    def add(self, us: int, cnt: int, s1: float, s2: float, top_ns: float) -> None:
        self.counts[us] = self.counts.get(us, 0) + int(cnt)
        self.n += int(cnt)
        self.total += s1
        self.total_sq += s2
        self.top = top_ns if self.top is None or top_ns > self.top else self.top

    def stats(self, name: str) -> dict[str, float | None]:
        """The keys `_stats` gives; quantiles interpolate like quantile_cont over the 1 us
        values, mean, std and max are exact."""
        keys = [f"{k}_{name}_ms" for k in ("mean", "median", "std")]
        keys += [f"p{_pkey(p)}_{name}_ms" for p in PERCENTILES] + [f"max_{name}_ms"]
        if not self.n:
            return dict.fromkeys(keys)
        values = np.array(sorted(self.counts), dtype=np.float64)
        cum = np.cumsum([self.counts[int(v)] for v in values])
        n = self.n

        def quantile(q: float) -> float:
            # quantile_cont: linear interpolation between order statistics floor(h) and ceil(h).
            h = (n - 1) * q
            lo_i, hi_i = int(np.floor(h)), int(np.ceil(h))
            v_lo = values[np.searchsorted(cum, lo_i, side="right")]
            v_hi = values[np.searchsorted(cum, hi_i, side="right")]
            return float(v_lo + (v_hi - v_lo) * (h - lo_i)) / 1e3

        mean = self.total / n
        out: dict[str, float | None] = {
            f"mean_{name}_ms": mean, f"median_{name}_ms": quantile(0.5),
            f"std_{name}_ms": float(np.sqrt(max(0.0, self.total_sq / n - mean * mean)))}
        for p in PERCENTILES:
            out[f"p{_pkey(p)}_{name}_ms"] = quantile(p / 100)
        out[f"max_{name}_ms"] = float(self.top) / 1e6 if self.top is not None else None
        return out


def _itl_stats(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, float | None]:
    """ITL as the store's `itl` view defines it (`*_itl_ms`: each read's gap spread over the
    content events it delivered) and the per-event gaps (`raw_*_itl_ms`: 0 ms inside a read,
    what vLLM's `bench serve` reports), with the keys `_stats` gives.

    Memory is bounded by one slice plus the distinct 1 us values.
    """
    bounds = con.execute(
        f"SELECT min(request_idx), max(request_idx), sum(num_chunks) FROM requests WHERE run_id = ? AND {_OK}",
        [run_id],
    ).fetchone()
    hists = (_Histogram(), _Histogram())
    if bounds is not None and bounds[0] is not None:
        lo, hi, chunks = int(bounds[0]), int(bounds[1]), int(bounds[2] or 0)
        per_request = max(1.0, chunks / max(1, hi - lo + 1))
        step = max(1, int(ITL_SLICE_CHUNKS / per_request))
        for a in range(lo, hi + 1, step):
            for kind, us, cnt, s1, s2, top in con.execute(_ITL_SLICE_SQL, {"run": run_id, "a": a, "b": a + step}).fetchall():
                hists[kind].add(us, cnt, s1, s2, top)
    out = hists[0].stats("itl")
    out.update({f"raw_{k}": v for k, v in hists[1].stats("itl").items()})
    return out


def summarize(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    slo: dict[str, float] | None = None,
    open_loop_uncapped: bool = False,
) -> dict[str, Any]:
    slo = slo or {}
    q = con.execute
    r = q(
        f"""SELECT count(*) FILTER (WHERE phase = 'measure'),
               count(*) FILTER (WHERE {_OK}),
               count(*) FILTER (WHERE phase = 'measure' AND error_class IS NOT NULL),
               count(*),
               (max(end_ns) FILTER (WHERE phase = 'measure') - min(send_ns) FILTER (WHERE phase = 'measure')) / 1e9,
               sum(coalesce(prompt_tokens, target_input_tokens)) FILTER (WHERE {_OK}),
               sum(output_tokens) FILTER (WHERE {_OK}),
               count(*) FILTER (WHERE {_OK} AND output_tokens_source = 'usage'),
               count(*) FILTER (WHERE {_OK} AND prompt_tokens IS NULL),
               sum(coalesced_chunks) FILTER (WHERE {_OK}),
               sum(num_content_chunks) FILTER (WHERE {_OK})
           FROM requests WHERE run_id = ?""",
        [run_id],
    ).fetchone()
    assert r is not None
    measured, completed, failed, total_sent, duration = r[0], r[1], r[2], r[3], r[4] or 0.0
    in_tok, out_tok = int(r[5] or 0), int(r[6] or 0)
    duration = max(duration, 1e-9)
    s: dict[str, Any] = {
        "run_id": run_id,
        "duration": duration,
        "num_prompts": measured,
        "completed": completed,
        "failed": failed,
        "requests_sent": total_sent,
        "excluded_warmup_cooldown": total_sent - measured,
        "total_input_tokens": in_tok,
        "total_output_tokens": out_tok,
        "request_throughput": completed / duration,
        "input_throughput": in_tok / duration,
        "output_throughput": out_tok / duration,
        "total_token_throughput": (in_tok + out_tok) / duration,
        "output_tokens_source": {"usage": r[7], "counted": completed - r[7]},
        "input_tokens_estimated": r[8],
    }
    base = f"SELECT {{col}} AS x FROM request_latency WHERE run_id = ? AND {_OK}"
    for name, col in (("ttft", "ttft_ms"), ("ttft_intended", "ttft_intended_ms"), ("tpot", "tpot_ms"),
                      ("e2el", "e2e_ms"), ("e2el_intended", "e2e_intended_ms")):
        s.update(_stats(con, base.format(col=col), [run_id], name))
    s.update(_itl_stats(con, run_id))
    coalesced, content = int(r[9] or 0), int(r[10] or 0)
    s["coalesced_chunks"] = coalesced
    s["coalesced_fraction"] = coalesced / content if content else 0.0
    s.update(_stats(con, base.format(col="trailing_ms"), [run_id], "trailing"))

    errs = q(
        "SELECT error_class, count(*) FROM requests WHERE run_id = ? AND error_class IS NOT NULL "
        "GROUP BY 1 ORDER BY 2 DESC",
        [run_id],
    ).fetchall()
    s["errors"] = {k: v for k, v in errs}

    if slo:
        good = q(
            f"SELECT count(*) FROM request_latency WHERE run_id = ? AND {_OK} AND {slo_condition_sql(slo)}",
            [run_id],
        ).fetchone()
        n_good = int(good[0]) if good else 0
        s["slo_ms"] = slo
        s["good_requests"] = n_good
        s["request_goodput"] = n_good / duration
        s["goodput_fraction"] = n_good / measured if measured else 0.0

    s["by_label"] = _by_label(con, run_id)
    s.update(tenant_sections(con, run_id))  # by_tenant, by_adapter: where the run has them
    s["client_health"] = _client_health(con, run_id, open_loop_uncapped)
    s["client_bound"] = bool(s["client_health"]["client_bound_reasons"])
    warnings = list(s["client_health"]["client_bound_reasons"])
    if s["coalesced_fraction"] > COALESCED_WARN_FRACTION:
        raw = s["raw_median_itl_ms"]
        warnings.append(
            f"{s['coalesced_fraction']:.1%} of content chunks arrived in the same socket read as the "
            "previous one (the client read late or the server wrote several at once): ITL spreads each "
            "read's gap over its chunks; per-event gaps, which count them as 0 ms, have median "
            f"{'-' if raw is None else f'{raw:.2f}'} ms (raw_*_itl_ms)"
        )
    warnings.extend(_trailing_warnings(s))
    s["warnings"] = warnings
    return s


def _trailing_warnings(s: dict[str, Any]) -> list[str]:
    """Usage and [DONE] long after the last token: not in e2e (it ends at the last event with
    choices), but a client that waits for [DONE] waits for it, so it is worth a line."""
    med, p99 = s.get("median_trailing_ms"), s.get("p99_trailing_ms")
    if med is not None and med > TRAILING_WARN_MEDIAN_MS:
        return [f"usage/[DONE] typically arrived {med:.1f} ms after the last event with choices "
                f"(median > {TRAILING_WARN_MEDIAN_MS:g} ms); e2e and TPOT end at that event"]
    if p99 is not None and p99 > TRAILING_WARN_P99_MS:
        return [f"usage/[DONE] arrived {p99:.0f} ms after the last event with choices at p99 "
                f"(> {TRAILING_WARN_P99_MS:g} ms); e2e and TPOT end at that event"]
    return []


def _by_label(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, dict[str, Any]]:
    rows = con.execute(
        """SELECT label, count(*), count(*) FILTER (WHERE error_class IS NULL),
               quantile_cont(ttft_ms, 0.5) FILTER (WHERE error_class IS NULL),
               quantile_cont(ttft_ms, 0.99) FILTER (WHERE error_class IS NULL),
               quantile_cont(tpot_ms, 0.5) FILTER (WHERE error_class IS NULL),
               quantile_cont(tpot_ms, 0.99) FILTER (WHERE error_class IS NULL),
               quantile_cont(e2e_ms, 0.99) FILTER (WHERE error_class IS NULL),
               sum(output_tokens) FILTER (WHERE error_class IS NULL)
           FROM request_latency WHERE run_id = ? AND phase = 'measure' GROUP BY label ORDER BY label""",
        [run_id],
    ).fetchall()
    return {
        str(r[0]): {
            "requests": r[1], "completed": r[2], "median_ttft_ms": r[3], "p99_ttft_ms": r[4],
            "median_tpot_ms": r[5], "p99_tpot_ms": r[6], "p99_e2el_ms": r[7],
            "total_output_tokens": int(r[8] or 0),
        }
        for r in rows
    }


def _client_health(con: duckdb.DuckDBPyConnection, run_id: str, open_loop_uncapped: bool) -> dict[str, Any]:
    sched = con.execute(
        "SELECT quantile_cont(schedule_lag_ms, 0.5), quantile_cont(schedule_lag_ms, 0.99), max(schedule_lag_ms) "
        "FROM request_latency WHERE run_id = ? AND phase = 'measure' AND schedule_lag_ms IS NOT NULL",
        [run_id],
    ).fetchone()
    health = con.execute(
        "SELECT median(loop_lag_ms), quantile_cont(loop_lag_ms, 0.99), max(loop_lag_ms), "
        "avg(cpu_percent), max(cpu_percent), max(rss_bytes), count(*) FROM client_samples WHERE run_id = ?",
        [run_id],
    ).fetchone()
    assert sched is not None and health is not None
    h: dict[str, Any] = {
        "median_schedule_lag_ms": sched[0], "p99_schedule_lag_ms": sched[1], "max_schedule_lag_ms": sched[2],
        "median_loop_lag_ms": health[0], "p99_loop_lag_ms": health[1], "max_loop_lag_ms": health[2],
        "mean_cpu_percent": health[3], "max_cpu_percent": health[4], "peak_rss_bytes": health[5],
        "samples": health[6],
    }
    # Several workers (`--workers`, `--ray`): each is one process with its own loop and CPU, so
    # each is judged alone and the run is client-bound when any one is (an average over
    # workers would hide one saturated process among idle ones).
    per_worker = con.execute(
        "SELECT worker, median(loop_lag_ms), max(loop_lag_ms), avg(cpu_percent) FROM client_samples "
        "WHERE run_id = ? GROUP BY worker ORDER BY worker", [run_id]).fetchall()
    sched_by_worker = con.execute(
        "SELECT r.worker, quantile_cont(l.schedule_lag_ms, 0.99) FROM request_latency l "
        "JOIN requests r USING (run_id, request_idx) WHERE l.run_id = ? AND l.phase = 'measure' "
        "AND l.schedule_lag_ms IS NOT NULL GROUP BY r.worker ORDER BY r.worker", [run_id]).fetchall()
    reasons = []
    for worker, loop_median, loop_max, cpu in per_worker:
        who = "client" if worker is None else f"worker {worker}"
        if cpu is not None and cpu >= CPU_BOUND_PERCENT:
            reasons.append(f"{who} CPU averaged {cpu:.0f}% of a core (>= {CPU_BOUND_PERCENT:.0f}%)")
        if loop_median is not None and loop_median > LOOP_LAG_MEDIAN_MS:
            reasons.append(f"{who} event loop typically {loop_median:.1f} ms late (> {LOOP_LAG_MEDIAN_MS:.0f} ms)")
        elif loop_max is not None and loop_max > LOOP_LAG_MAX_MS:
            reasons.append(f"{who} event loop stalled {loop_max:.0f} ms at worst (> {LOOP_LAG_MAX_MS:.0f} ms)")
    for worker, p99 in sched_by_worker:
        if open_loop_uncapped and p99 is not None and p99 > SCHEDULE_LAG_P99_MS:
            who = "" if worker is None else f"worker {worker}: "
            reasons.append(f"{who}p99 schedule lag {p99:.1f} ms (> {SCHEDULE_LAG_P99_MS:.0f} ms): "
                           "requests left later than the arrival schedule asked")
    if len(per_worker) > 1 or any(w is not None for w, *_ in per_worker):
        h["per_worker"] = [{"worker": w, "median_loop_lag_ms": m, "max_loop_lag_ms": x, "mean_cpu_percent": c}
                           for w, m, x, c in per_worker]
    h["client_bound_reasons"] = reasons
    h["thresholds"] = {"cpu_percent": CPU_BOUND_PERCENT, "median_loop_lag_ms": LOOP_LAG_MEDIAN_MS,
                       "max_loop_lag_ms": LOOP_LAG_MAX_MS, "p99_schedule_lag_ms": SCHEDULE_LAG_P99_MS}
    return h


def mark_cooldown(con: duckdb.DuckDBPyConnection, run_id: str, last_send_ns: int, cooldown_s: float) -> None:
    """Requests sent in the last `cooldown_s` before sending stopped leave the summary."""
    if cooldown_s <= 0:
        return
    con.execute(
        "UPDATE requests SET phase = 'cooldown' WHERE run_id = ? AND phase = 'measure' AND send_ns > ?",
        [run_id, last_send_ns - int(cooldown_s * 1e9)],
    )
