"""The run summary per tenant and per adapter (`summary["by_tenant"]`, `summary["by_adapter"]`).

Each group gets what the run's own summary gives, for its requests in the measured phase:
requests sent, completed, failed, its share of the requests, TTFT and TPOT median and p99,
E2E p99, and the input and output tokens of its completed requests. A run without tenants
(or without adapters) has no such section. A request without a tenant is counted under
`(none)`, one on the base model under `base`.
"""

from __future__ import annotations

from typing import Any

import duckdb

NO_TENANT = "(none)"
BASE_MODEL = "base"
GROUPS = {"tenant": NO_TENANT, "adapter": BASE_MODEL}

# One query per grouping column; the SQL is also what a reader reruns against the store.
GROUP_SQL = """
SELECT coalesce({col}, '{none}') AS name, count(*) AS requests,
       count(*) FILTER (WHERE error_class IS NULL) AS completed,
       count(*) FILTER (WHERE error_class IS NOT NULL) AS failed,
       quantile_cont(ttft_ms, 0.5) FILTER (WHERE error_class IS NULL) AS median_ttft_ms,
       quantile_cont(ttft_ms, 0.99) FILTER (WHERE error_class IS NULL) AS p99_ttft_ms,
       quantile_cont(tpot_ms, 0.5) FILTER (WHERE error_class IS NULL) AS median_tpot_ms,
       quantile_cont(tpot_ms, 0.99) FILTER (WHERE error_class IS NULL) AS p99_tpot_ms,
       quantile_cont(e2e_ms, 0.99) FILTER (WHERE error_class IS NULL) AS p99_e2el_ms,
       sum(prompt_tokens) FILTER (WHERE error_class IS NULL) AS total_input_tokens,
       sum(output_tokens) FILTER (WHERE error_class IS NULL) AS total_output_tokens
FROM request_latency WHERE run_id = $run_id AND phase = 'measure'
GROUP BY 1 ORDER BY 1
"""


def group_sql(column: str) -> str:
    if column not in GROUPS:
        raise ValueError(f"group: {column!r} is not one of {', '.join(GROUPS)}")
    return GROUP_SQL.format(col=column, none=GROUPS[column])


def by_group(con: duckdb.DuckDBPyConnection, run_id: str, column: str) -> dict[str, dict[str, Any]]:
    """Per value of `column` (tenant or adapter); empty when no request of the run has one."""
    has = con.execute(f"SELECT count({column}) FROM requests WHERE run_id = ?", [run_id]).fetchone()
    if not has or not has[0]:
        return {}
    cur = con.execute(group_sql(column), {"run_id": run_id})
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    total = sum(r["requests"] for r in rows) or 1
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        name = str(r.pop("name"))
        r["share"] = r["requests"] / total
        r["total_input_tokens"] = int(r["total_input_tokens"] or 0)
        r["total_output_tokens"] = int(r["total_output_tokens"] or 0)
        out[name] = r
    return out


def tenant_sections(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    """`by_tenant` and `by_adapter`, each only where the run has it."""
    out: dict[str, Any] = {}
    for column in GROUPS:
        groups = by_group(con, run_id, column)
        if groups:
            out[f"by_{column}"] = groups
    return out
