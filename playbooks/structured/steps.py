"""What the engine's step log says, where it says it (the bundled engine's structured-output
fields; a real engine's run has none): the compiles, the cache, and each step's token mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from playbooks.sql import fetch_one

COMPILES_SQL = """
SELECT sum(grammar_compiles) AS compiles,
       sum(grammar_compile_ms) AS compile_ms,
       max(grammar_compile_ms / grammar_compiles) FILTER (WHERE grammar_compiles > 0)
           AS max_step_ms_per_compile,
       sum(grammar_cache_hits) AS hits,
       sum(grammar_cache_misses) AS misses,
       count(*) FILTER (WHERE grammar_waiting > 0) AS steps_with_waiting,
       count(*) FILTER (WHERE grammar_waiting > 0 AND (prefill_tokens > 0 OR decode_seqs > 0))
           AS steps_working_while_waiting,
       max(grammar_waiting) AS peak_waiting,
       count(*) AS steps
FROM engine_steps
WHERE run_id = $run_id AND structured_seqs IS NOT NULL
"""

MASK_SQL = """
SELECT count(*) AS steps,
       avg(structured_seqs) AS seqs_per_step,
       avg(grammar_mask_ms) AS mask_ms_per_step,
       avg(grammar_mask_exposed_ms) AS exposed_ms_per_step,
       avg((end_s - start_s) * 1e3) AS step_ms,
       count(*) FILTER (WHERE grammar_mask_exposed_ms > 0.001) AS steps_exposed,
       bool_and(grammar_mask_blocking) AS all_blocking,
       bool_or(grammar_mask_blocking) AS any_blocking
FROM engine_steps
WHERE run_id = $run_id AND structured_seqs > 0
"""


@dataclass
class StepFacts:
    compiles: dict[str, Any]
    mask: dict[str, Any]
    sql: dict[str, str]

    @property
    def mode(self) -> str | None:
        """blocking | overlap | mixed (the setting changed mid-run); None without masked steps."""
        if not self.mask.get("steps"):
            return None
        if self.mask["all_blocking"]:
            return "blocking"
        return "mixed" if self.mask["any_blocking"] else "overlap"

    @property
    def ms_per_compile(self) -> float | None:
        n = self.compiles.get("compiles") or 0
        return self.compiles["compile_ms"] / n if n else None

    @property
    def exposed_share(self) -> float:
        """Of an average structured step, the share the mask added beyond the forward pass."""
        m = self.mask
        return m["exposed_ms_per_step"] / m["step_ms"] if m.get("steps") and m["step_ms"] else 0.0


def load_steps(con: duckdb.DuckDBPyConnection, run_id: str) -> StepFacts | None:
    """None where the run's step log has no structured-output fields."""
    csql, crow = fetch_one(con, COMPILES_SQL, run_id=run_id)
    names = ("compiles", "compile_ms", "max_step_ms_per_compile", "hits", "misses",
             "steps_with_waiting", "steps_working_while_waiting", "peak_waiting", "steps")
    compiles = dict(zip(names, crow, strict=True))
    if not compiles["steps"]:
        return None
    msql, mrow = fetch_one(con, MASK_SQL, run_id=run_id)
    mnames = ("steps", "seqs_per_step", "mask_ms_per_step", "exposed_ms_per_step", "step_ms",
              "steps_exposed", "all_blocking", "any_blocking")
    mask = dict(zip(mnames, mrow, strict=True))
    return StepFacts({k: (v or 0) for k, v in compiles.items()}, mask,
                     {"compiles": csql, "mask": msql})
