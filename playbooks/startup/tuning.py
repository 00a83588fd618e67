"""The start-up log's kernel tuning tables (rows `probes.startup_log` stored in phase
`tuning`, one per table a line named) as sightings for `playbooks.tuning_tables`."""

from __future__ import annotations

import duckdb

from infbench.specs.tuning import read_tuning_lines
from playbooks.findings import Finding
from playbooks.sql import fetch
from playbooks.tuning_tables import Sighting, tuning_context, tuning_findings

TUNING_SQL = """
SELECT DISTINCT line_no, rank, text
FROM startup_events
WHERE log_id = $log_id AND phase = 'tuning'
ORDER BY line_no
"""


def tuning_tables(con: duckdb.DuckDBPyConnection, log_id: str,
                  engine: str) -> tuple[list[Finding], dict[str, int]]:
    """(a finding per device and kernel whose table was missing, the counts for the context).
    The stored text is read again by the same reader the import used."""
    sql, rows = fetch(con, TUNING_SQL, log_id=log_id)
    sightings = [Sighting(t, int(line_no), str(rank))
                 for line_no, rank, text in rows for t in read_tuning_lines(str(text))]
    hint = engine if engine in ("vllm", "sglang") else None
    return tuning_findings(sightings, hint, sql), tuning_context(sightings)
