"""Evidence queries rendered with literal values, so the SQL shown is the SQL that ran and a
user can paste it into `duckdb FILE` for the same numbers."""

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
        if m.group(1) not in params:
            raise KeyError(f"query parameter ${m.group(1)} was not given")
        return literal(params[m.group(1)])

    return _PLACEHOLDER.sub(sub, textwrap.dedent(sql).strip())


def fetch(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> tuple[str, list[tuple[Any, ...]]]:
    text = render(sql, **params)
    return text, con.execute(text).fetchall()


def fetch_numpy(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> tuple[str, dict[str, Any]]:
    text = render(sql, **params)
    return text, con.execute(text).fetchnumpy()
