"""What a playbook knows about a run before it looks at latencies: which data exist, and the
engine setup (model, GPU, token budget) recorded with the run or given by the user (resolved
by `playbooks.engine_setup`, the one resolver every playbook uses)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from infbench.store import get_run
from playbooks.engine_setup import EngineSetup, engine_setup
from playbooks.sql import fetch_one

_INVENTORY_SQL = """
SELECT (SELECT count(*) FROM chunks WHERE run_id = $run_id AND content) AS content_chunks,
       (SELECT count(*) FROM requests WHERE run_id = $run_id) AS requests,
       (SELECT count(*) FROM engine_steps WHERE run_id = $run_id) AS engine_steps,
       (SELECT count(*) FROM metric_samples WHERE run_id = $run_id) AS metric_samples,
       (SELECT count(*) FROM client_samples WHERE run_id = $run_id) AS client_samples
"""

__all__ = ["EngineSetup", "RunContext", "engine_setup", "load_context"]


@dataclass
class RunContext:
    run_id: str
    t0_ns: int
    config: dict[str, Any]
    counts: dict[str, int]
    setup: EngineSetup
    inventory_sql: str

    @property
    def has_steps(self) -> bool:
        return self.counts["engine_steps"] > 0

    @property
    def has_metrics(self) -> bool:
        return self.counts["metric_samples"] > 0

    def data_sources(self) -> dict[str, bool]:
        return {
            "client_timeline": self.counts["content_chunks"] > 0,
            "engine_steps": self.has_steps,
            "server_metrics": self.has_metrics,
            "client_health": self.counts["client_samples"] > 0,
        }


def load_context(con: duckdb.DuckDBPyConnection, run_ref: str,
                 overrides: dict[str, Any] | None = None) -> RunContext:
    run = get_run(con, run_ref)
    sql, row = fetch_one(con, _INVENTORY_SQL, run_id=run.run_id)
    counts = dict(zip(("content_chunks", "requests", "engine_steps", "metric_samples",
                       "client_samples"), (int(v) for v in row), strict=True))
    return RunContext(run_id=run.run_id, t0_ns=int(run.t0_monotonic_ns or 0), config=run.config,
                      counts=counts, setup=engine_setup(run.config, run.model, overrides),
                      inventory_sql=sql)
