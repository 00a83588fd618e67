"""An engine that stopped emitting tokens to every in-flight request (a hang).

The run's last content chunk is when the engine stopped, as the clients saw it. Requests
that were streaming then (a token within `STREAMING_MIN_S` or 3 x the run's p99 gap of the
stop), queued without a token, or sent later, and that then waited at least `QUIET_MIN_S`
(and 10 x the p99 gap) without a single token before they timed out, were cut off or were
cancelled, are *stranded*. A run that simply ended has none (its in-flight requests
finished); a run where one request errored has at most one, and if the others kept
streaming past its last token, none. So the finding needs two
stranded requests, or one with the engine's own counters confirming it: requests running or
waiting after the stop while `vllm:generation_tokens_total` stayed flat.

The step log, when recorded, gives the last engine step seen; otherwise the last scrape
at which the generation counter moved, otherwise the last chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from playbooks.findings import Evidence, Finding
from playbooks.sql import fetch_one
from playbooks.stalls.watch_stacks import watch_stacks

QUIET_MIN_S = 1.0
# A request was still streaming when the engine stopped if its last token came at most this
# long (or 3 x the run's p99 gap) before the stop: in lockstep decoding that is one step.
STREAMING_MIN_S = 0.05
# The classes a request ends with when it waited for tokens that never came: the client's
# timeout, the stream closed without [DONE], or the run stopped while it waited. HTTP errors
# and refused connections answered quickly: they say nothing about a stopped step loop.
STRANDED_CLASSES = ("timeout", "truncated_sse", "connection_reset", "cancelled")

STRANDED_SQL = """
WITH gaps AS (
  SELECT $p99_gap_ms AS p99  -- the run's p99 gap (itl view), from the playbook's baseline
), stop AS (
  SELECT coalesce((SELECT max(t_ns) FROM chunks WHERE run_id = $run_id AND content),
                  (SELECT min(send_ns) FROM requests WHERE run_id = $run_id)) AS stop_ns,
         (SELECT max(t_ns) FROM chunks WHERE run_id = $run_id AND content) IS NOT NULL AS any_token,
         -- how long a silence is not yet a hang: 10 x the run's p99 gap, at least the floor
         greatest($quiet_min_ns, 10 * (SELECT p99 FROM gaps) * 1e6) AS quiet_ns,
         -- streaming when the engine stopped: a token within 3 x the p99 gap of the stop
         greatest($streaming_min_ns, 3 * (SELECT p99 FROM gaps) * 1e6) AS streaming_ns
), r AS (
  SELECT q.*, s.stop_ns, s.quiet_ns, s.any_token,
         q.end_ns - greatest(q.send_ns, s.stop_ns) AS waited_ns,
         q.send_ns > s.stop_ns OR q.first_content_ns IS NULL
           OR q.last_content_ns >= s.stop_ns - s.streaming_ns AS waiting_at_stop
  FROM requests q, stop s WHERE q.run_id = $run_id
), stranded AS (
  -- a request that had already gone quiet while others streamed is a private stall, not this
  SELECT * FROM r
  WHERE end_ns > stop_ns AND waiting_at_stop AND waited_ns >= quiet_ns
    AND error_class IN $classes
)
SELECT (SELECT stop_ns FROM stop) AS stop_ns, (SELECT any_token FROM stop) AS any_token,
       (SELECT quiet_ns FROM stop) AS quiet_ns,
       (SELECT count(*) FROM stranded) AS stranded,
       (SELECT count(*) FROM stranded WHERE send_ns <= stop_ns) AS in_flight_at_stop,
       (SELECT count(*) FROM stranded WHERE send_ns > stop_ns) AS sent_after_stop,
       (SELECT count(*) FROM stranded WHERE first_content_ns IS NULL) AS never_got_a_token,
       (SELECT count(*) FROM stranded WHERE error_class = 'timeout') AS timed_out,
       (SELECT count(*) FROM stranded WHERE error_class IN ('truncated_sse', 'connection_reset'))
           AS cut_off,
       (SELECT count(*) FROM stranded WHERE error_class = 'cancelled') AS cancelled,
       (SELECT max(end_ns) FROM stranded) AS last_stranded_end_ns,
       (SELECT max(waited_ns) FROM stranded) AS longest_wait_ns,
       (SELECT string_agg(request_idx::VARCHAR, ',' ORDER BY request_idx)
          FROM (SELECT request_idx FROM stranded ORDER BY request_idx LIMIT 10)) AS examples,
       (SELECT count(*) FROM r WHERE error_class IS NULL) AS completed,
       (SELECT count(*) FROM r) AS requests
"""

# What the engine itself recorded around the stop. Steps are on the engine's monotonic
# clock (the client's on the same host); t0 moves them onto the run's axis. Gauges and
# counters are summed over their label sets per scrape.
ENGINE_SQL = """
WITH steps AS (
  SELECT step_id, CAST(round(end_s * 1e9) AS BIGINT) - $t0_ns AS end_ns
  FROM engine_steps WHERE run_id = $run_id
), m AS (
  SELECT t_ns, name, sum(value) AS value FROM metric_samples
  WHERE run_id = $run_id AND name IN ('vllm:num_requests_running', 'vllm:num_requests_waiting',
                                      'vllm:generation_tokens_total')
  GROUP BY t_ns, name
), gen AS (
  SELECT t_ns, value, value - lag(value) OVER (ORDER BY t_ns) AS delta
  FROM m WHERE name = 'vllm:generation_tokens_total'
)
SELECT (SELECT max(step_id) FROM steps) AS last_step_id,
       (SELECT arg_max(end_ns, step_id) FROM steps) AS last_step_end_ns,
       (SELECT count(*) FROM steps WHERE end_ns > ($stop_ns::BIGINT + $quiet_ns::BIGINT)) AS steps_after_stop,
       (SELECT count(DISTINCT t_ns) FROM m WHERE t_ns > ($stop_ns::BIGINT + $quiet_ns::BIGINT)) AS scrapes_after_stop,
       (SELECT max(value) FROM m WHERE t_ns > ($stop_ns::BIGINT + $quiet_ns::BIGINT)
          AND name = 'vllm:num_requests_running') AS running_after_stop,
       (SELECT max(value) FROM m WHERE t_ns > ($stop_ns::BIGINT + $quiet_ns::BIGINT)
          AND name = 'vllm:num_requests_waiting') AS waiting_after_stop,
       -- growth between scrapes taken after the stop (tokens in flight at the stop, counted
       -- before the first of them, do not show up here)
       (SELECT max(value) - min(value) FROM gen WHERE t_ns > $stop_ns) AS tokens_generated_after_stop,
       (SELECT max(t_ns) FROM gen WHERE delta > 0) AS generation_last_moved_ns,
       (SELECT count(*) FROM metric_samples WHERE run_id = $run_id
          AND name = 'infbench:health_status'
          AND t_ns > ($stop_ns::BIGINT + $quiet_ns::BIGINT)) AS health_probes_after_stop,
       (SELECT count(*) FILTER (WHERE value = 200) FROM metric_samples WHERE run_id = $run_id
          AND name = 'infbench:health_status'
          AND t_ns > ($stop_ns::BIGINT + $quiet_ns::BIGINT)) AS health_200_after_stop
"""


@dataclass
class Stop:
    values: dict[str, Any]
    sql: str
    engine: dict[str, Any]
    engine_sql: str

    @property
    def confirmed_by_engine(self) -> bool:
        """Requests ran or waited in the engine after the stop and it generated nothing."""
        e = self.engine
        pending = (e["running_after_stop"] or 0) + (e["waiting_after_stop"] or 0)
        return bool(e["scrapes_after_stop"]) and pending > 0 and e["tokens_generated_after_stop"] == 0


def measure(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int, p99_gap_ms: float) -> Stop:
    classes = "(" + ", ".join(f"'{c}'" for c in STRANDED_CLASSES) + ")"
    sql, row = fetch_one(con, STRANDED_SQL.replace("$classes", classes), run_id=run_id,
                         quiet_min_ns=int(QUIET_MIN_S * 1e9),
                         streaming_min_ns=int(STREAMING_MIN_S * 1e9), p99_gap_ms=float(p99_gap_ms))
    cols = ["stop_ns", "any_token", "quiet_ns", "stranded", "in_flight_at_stop",
            "sent_after_stop", "never_got_a_token", "timed_out", "cut_off", "cancelled",
            "last_stranded_end_ns", "longest_wait_ns", "examples", "completed", "requests"]
    values = dict(zip(cols, row, strict=True))
    esql, erow = fetch_one(con, ENGINE_SQL, run_id=run_id, t0_ns=int(t0_ns),
                           stop_ns=int(values["stop_ns"] or 0), quiet_ns=int(values["quiet_ns"]))
    ecols = ["last_step_id", "last_step_end_ns", "steps_after_stop", "scrapes_after_stop",
             "running_after_stop", "waiting_after_stop", "tokens_generated_after_stop",
             "generation_last_moved_ns", "health_probes_after_stop", "health_200_after_stop"]
    return Stop(values, sql, dict(zip(ecols, erow, strict=True)), esql)


def _s(ns: Any) -> float | None:
    return None if ns is None else round(float(ns) / 1e9, 3)


def _last_step(stop: Stop) -> tuple[str, dict[str, Any]]:
    e, v = stop.engine, stop.values
    if e["last_step_id"] is not None:
        return (f"the step log ends at step {e['last_step_id']} ({_s(e['last_step_end_ns'])} s)",
                {"source": "engine_steps", "last_step_id": int(e["last_step_id"]),
                 "last_step_end_s": _s(e["last_step_end_ns"])})
    if e["generation_last_moved_ns"] is not None:
        return (f"vllm:generation_tokens_total last moved in the scrape at "
                f"{_s(e['generation_last_moved_ns'])} s",
                {"source": "metric_samples", "generation_last_moved_s": _s(e["generation_last_moved_ns"])})
    return ("no step log or metrics: the last chunk is the last sign of the engine",
            {"source": "chunks", "last_chunk_s": _s(v["stop_ns"]) if v["any_token"] else None})


def engine_stopped_finding(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int,
                           has_steps: bool, p99_gap_ms: float) -> Finding | None:
    """`p99_gap_ms`: the run's p99 inter-token gap (0 when it has none)."""
    stop = measure(con, run_id, t0_ns, p99_gap_ms)
    v, e = stop.values, stop.engine
    if not v["stranded"] or (v["stranded"] < 2 and not stop.confirmed_by_engine):
        return None
    when = (f"{_s(v['stop_ns'])} s into the run" if v["any_token"]
            else "before its first token (no request received any)")
    last_step_text, last_step = _last_step(stop)
    summary = (f"The engine stopped emitting tokens {when}: {v['stranded']} request(s) were "
               f"stranded ({v['in_flight_at_stop']} in flight then, {v['sent_after_stop']} sent "
               f"later; {v['timed_out']} timed out, {v['cut_off']} cut off, {v['cancelled']} "
               f"cancelled), waiting up to {v['longest_wait_ns'] / 1e9:.1f} s without a token. "
               f"Last engine step seen: {last_step_text}.")
    if e["tokens_generated_after_stop"]:
        summary += (f" The engine counted {e['tokens_generated_after_stop']:.0f} tokens after the "
                    "stop that this run never received: either it served other clients "
                    "meanwhile, or the hang is between the step loop and the sockets "
                    "(detokenizer, output queue, HTTP server).")
    if e["health_probes_after_stop"]:
        summary += (f" Its /health answered 200 to {e['health_200_after_stop']} of "
                    f"{e['health_probes_after_stop']} probes after the stop"
                    + (": a liveness probe on /health did not see this hang."
                       if e["health_200_after_stop"] else "."))
    stacks = watch_stacks(con, run_id)
    if stacks is not None:
        summary += (f" The live watch captured the engine's stacks at {stacks.t_s:.1f} s, during "
                    f"the stop (capture {stacks.capture_id}): {stacks.describe()}.")
    evidence = [
        Evidence("stranded_requests", {
            "stopped_at_s": _s(v["stop_ns"]), "stranded": v["stranded"],
            "in_flight_at_stop": v["in_flight_at_stop"], "sent_after_stop": v["sent_after_stop"],
            "never_got_a_token": v["never_got_a_token"], "timed_out": v["timed_out"],
            "cut_off": v["cut_off"], "cancelled": v["cancelled"],
            "longest_wait_s": _s(v["longest_wait_ns"]), "quiet_threshold_s": _s(v["quiet_ns"]),
            "completed_requests": v["completed"], "requests": v["requests"],
            "example_requests": v["examples"]}, stop.sql,
            "stopped_at = the run's last content chunk; stranded = in flight after it, no token "
            "for at least quiet_threshold, then timed out, cut off or cancelled"),
        Evidence("engine_after_stop", {
            **last_step, "steps_after_stop": e["steps_after_stop"] if has_steps else None,
            "scrapes_after_stop": e["scrapes_after_stop"],
            "max_running_after_stop": e["running_after_stop"],
            "max_waiting_after_stop": e["waiting_after_stop"],
            "tokens_generated_after_stop": e["tokens_generated_after_stop"],
            "confirmed_by_engine_counters": stop.confirmed_by_engine,
            "health_probes_after_stop": e["health_probes_after_stop"],
            "health_200_after_stop": e["health_200_after_stop"]}, stop.engine_sql,
            "the engine's own view: its step log and /metrics scrapes after the stop"),
    ]
    if stacks is not None:
        evidence.append(Evidence("stacks_during_stop", {
            "captured_at_s": round(stacks.t_s, 3), "capture_id": stacks.capture_id,
            **{f"{t['thread']} (pid {t['pid']})": t["at"] for t in stacks.threads[:20]}},
            stacks.sql, "each captured thread's innermost frame outside the standard library "
            "(the live watch's capture during the stop)"))
    first = ([f"next step: read the stacks the live watch took during the stop, `infbench "
              f"diagnose hang {stacks.capture_id}` (with Flight Recorder dumps: the rank behind "
              "or mismatched, the stuck collective); the thread that should be stepping shows "
              "what it waits on"] if stacks is not None else [
        "next step, while the engine is still hung: the hang playbook, `infbench diagnose "
        "hang --url URL --run RUN` (multi-rank: the rank behind or mismatched, the stuck "
        "collective, where each rank waits; runbook playbooks/hang/hang.md); by hand:"])
    return Finding(
        "engine_stopped", "Engine stopped emitting tokens (hang)",
        0.95 if stop.confirmed_by_engine or has_steps else 0.8, "critical", summary, evidence, [
            *first,
            "py-spy dump --native --pid ENGINE_PID (each worker/rank): the step loop's stack "
            "says what it waits on (a collective, a lock, a CUDA synchronize, a queue)",
            "multi-GPU: NCCL Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1, dumps analysed with torchfrtrace) and NCCL_DEBUG=INFO "
            "name the collective and the rank that did not arrive",
            "nvidia-smi: GPUs pinned at 100% with no progress = a kernel or collective "
            "spinning; idle = the host side is blocked",
            "/health and /metrics usually keep answering while the step loop is stuck: alert "
            "on vllm:num_requests_running > 0 with a flat vllm:generation_tokens_total, not on "
            "liveness alone",
        ], scope={"windows_s": [[_s(v["stop_ns"]) or 0.0, None]]})
