"""Was the run served from the prefix cache more than its workload explains?

A server reports the prompt tokens it took from its prefix cache in
`usage.prompt_tokens_details.cached_tokens` (stored as `requests.cached_tokens`). What a
workload itself repeats is known, request by request, from the start of its prompt:

- synthetic, structured, ShareGPT, trace rows without hash ids: nothing;
- shared prefix: the group's prefix, for every request of a group after its first;
- multi-turn: the previous turn's prompt and reply, for every turn after the first;
- Mooncake traces: the leading 512-token blocks whose hash ids an earlier row sent;
- replays (`diagnose dilution`'s re-runs): what each row's label says an earlier row sent;

plus, for every request, the fixed part every prompt starts with (BOS, chat template), which
preflight measured as the token model's `overhead`. These are upper bounds (a cache works in
whole blocks, evicts, and misses requests that arrive together), so a share well above them
means the cache held text from before the run: an earlier run's prompts (same seed with
`--reuse-prompts`, or a tool that does not salt) or a warm-up outside the run. Then latencies
measure a warm cache, not the workload, and the summary says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from infbench.loadgen.workloads.prompts import TokenModel
from infbench.loadgen.workloads.replay import repeated_prefix
from infbench.loadgen.workloads.trace import Trace

# A warning needs the measured share to exceed the implied one by this much (a share of all
# prompt tokens): block rounding and template tokens stay far below it, a repeated run
# (97% in the case that prompted this check) far above.
EXCESS_WARN = 0.10


def _implied(config: dict[str, Any], rows: list[tuple[Any, ...]]) -> list[int] | None:
    """Per row (request_idx order), the prompt tokens the workload itself repeats; None when
    that cannot be known (a trace file that is no longer readable)."""
    wl = config.get("workload") or {}
    kind = wl.get("workload")
    overhead = round(float((config.get("token_model") or {}).get("overhead") or 0.0))
    trace_shared: dict[int, int] = {}
    if kind == "trace":
        trace = Trace(Path(str(wl.get("trace"))), TokenModel(), float(wl.get("time_scale") or 1.0),
                      float(wl.get("trace_start_s") or 0.0), wl.get("trace_end_s"))
        try:
            trace_shared = dict(enumerate(trace.shared_prefix_tokens()))
        except ValueError:
            return None
    groups_seen: set[str] = set()
    turns: dict[tuple[int, int], tuple[int, int]] = {}
    out = []
    for idx, label, conv, turn, prompt, _cached, output in rows:
        implied = 0
        if kind == "prefix":
            if label in groups_seen:
                implied = int(wl.get("prefix_tokens") or 0)
            groups_seen.add(label)
        elif kind == "multiturn" and conv is not None:
            turns[(conv, turn)] = (prompt or 0, output or 0)
            if turn and (conv, turn - 1) in turns:
                implied = sum(turns[(conv, turn - 1)])
        elif kind == "trace":
            implied = trace_shared.get(int(idx), 0)
        elif kind == "replay":
            implied = repeated_prefix(label)
        out.append(min(int(prompt or 0), implied + overhead))
    return out


def prefix_cache_check(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """(figures, warning) for the run's measured, successful requests.

    figures: `cached_share` (cached / prompt tokens), `implied_share` (what the workload
    repeats, an upper bound; None if unknown), `requests_reporting` and `reuse_prompts`;
    None when no request reported cached tokens. warning: one line, or None."""
    row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
    config = json.loads(row[0]) if row and row[0] else {}
    rows = con.execute(
        "SELECT request_idx, label, conversation_id, turn, prompt_tokens, cached_tokens, output_tokens, "
        "phase = 'measure' AND error_class IS NULL AND prompt_tokens > 0 AND cached_tokens IS NOT NULL "
        "FROM requests WHERE run_id = ? ORDER BY request_idx", [run_id]).fetchall()
    counted = [r[:-1] for r in rows if r[-1]]
    if not counted:
        return None, None
    # Earlier requests (warm-up, failed ones) still seed groups and histories: the implied
    # figures are computed over every row, then summed over the counted ones.
    implied = _implied(config, [r[:-1] for r in rows])
    prompt_total = sum(int(r[4]) for r in counted)
    cached_total = sum(int(r[5]) for r in counted)
    reuse = bool((config.get("prompts") or {}).get("reuse"))
    figures: dict[str, Any] = {"cached_share": cached_total / prompt_total, "implied_share": None,
                               "requests_reporting": len(counted), "reuse_prompts": reuse}
    if implied is None:
        return figures, None
    implied_total = sum(n for n, r in zip(implied, rows, strict=True) if r[-1])
    figures["implied_share"] = implied_total / prompt_total
    excess = figures["cached_share"] - figures["implied_share"]
    if excess <= EXCESS_WARN:
        return figures, None
    head = (f"{figures['cached_share']:.0%} of prompt tokens came from the server's prefix cache, "
            f"the workload repeats at most {figures['implied_share']:.0%}: ")
    if reuse:
        return figures, head + ("prompts were reused (--reuse-prompts), so an earlier run with the "
                                "same seed warmed the cache; latencies measure cache reuse")
    return figures, head + ("the cache held these prompts before the run (another client, or a "
                            "warm-up outside it); latencies are not the workload's")
