"""Did the prompts have the length asked for? Target against the server's own count.

Every request row carries `target_input_tokens` (what the workload asked for, for a
conversation turn including the target's template tokens) and `prompt_tokens` (the server's
`usage.prompt_tokens`). Over the requests that completed and have both, the summary reports
their means, the mean error and the per-request spread, and warns when the mean prompt is
more than `MEAN_WARN` away from the mean target: then "512 in" was not what the server saw,
and a comparison with another target at "512 in" compares different workloads.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

MEAN_WARN = 0.02  # relative difference of the means that makes a warning
REQUEST_TOLERANCE = 0.01  # a request within this share of its target counts as on target


def input_length_check(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """(figures, warning): figures None when no request has both numbers (no usage block,
    or a workload without length targets, e.g. ShareGPT)."""
    row = con.execute(
        f"""SELECT count(*), avg(target_input_tokens), avg(prompt_tokens),
               avg(abs(prompt_tokens - target_input_tokens) / target_input_tokens),
               max(abs(prompt_tokens - target_input_tokens) / target_input_tokens),
               count(*) FILTER (WHERE prompt_tokens = target_input_tokens),
               count(*) FILTER (WHERE abs(prompt_tokens - target_input_tokens)
                                      <= {REQUEST_TOLERANCE} * target_input_tokens),
               max(abs(prompt_tokens - target_input_tokens))
           FROM requests WHERE run_id = ? AND error_class IS NULL
             AND target_input_tokens > 0 AND prompt_tokens IS NOT NULL""", [run_id]).fetchone()
    if row is None or not row[0]:
        return None, None
    n, target, actual, mean_abs, max_abs, exact, within, max_tokens = row
    cfg_row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
    config = json.loads(cfg_row[0]) if cfg_row and cfg_row[0] else {}
    source = (config.get("token_model") or {}).get("source", "assumed")
    error = (actual - target) / target
    figures = {
        "requests": int(n), "mean_target_tokens": float(target), "mean_actual_tokens": float(actual),
        "mean_error_pct": 100 * error, "mean_abs_error_pct": 100 * float(mean_abs),
        "max_abs_error_pct": 100 * float(max_abs), "max_abs_error_tokens": int(max_tokens),
        "exact": int(exact), "within_1pct": int(within), "sized_by": source,
    }
    if abs(error) <= MEAN_WARN:
        return figures, None
    how = {"tokenize": "the target's /tokenize counts",
           "measured": "a calibration from probe requests' usage (a target with /tokenize is sized exactly)",
           }.get(source, "an assumed one token per word (the target reported no usable counts)")
    return figures, (f"prompts averaged {actual:.1f} tokens as the server counted them where {target:.1f} were "
                     f"asked ({100 * error:+.1f}%, beyond {100 * MEAN_WARN:g}%): they were sized by {how}; "
                     "input-length figures describe what was sent, not what was asked")
