"""Running evidence queries so that the SQL a user sees is exactly the SQL that ran.

Queries are written with named placeholders (`$run_id`, `$thr_ms`, ...). They are rendered
with literal values before they run, so the rendered text can be pasted into `duckdb FILE`
and gives the same numbers.
"""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any

import duckdb

_PLACEHOLDER = re.compile(r"\$([a-z_][a-z0-9_]*)")


def literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"query parameter: {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"query parameter: unsupported type {type(value).__name__}")


def render(sql: str, **params: Any) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in params:
            raise KeyError(f"query parameter ${name} was not given")
        return literal(params[name])

    return _PLACEHOLDER.sub(sub, textwrap.dedent(sql).strip())


def fetch(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> tuple[str, list[tuple[Any, ...]]]:
    """Run a query; return the rendered SQL (for the evidence) and its rows."""
    text = render(sql, **params)
    return text, con.execute(text).fetchall()


def fetch_one(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> tuple[str, tuple[Any, ...]]:
    text, rows = fetch(con, sql, **params)
    return text, rows[0] if rows else ()


def fetch_numpy(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> tuple[str, dict[str, Any]]:
    """Columns as numpy arrays (no per-row Python objects: this path carries the 1M-row data)."""
    text = render(sql, **params)
    return text, con.execute(text).fetchnumpy()
