"""`infbench export`: a run's rows as Parquet or CSV files, one per table, streamed by DuckDB.

The tables are the ones `infbench import` reads back (`infbench.store.transfer.TABLES`),
stored findings included, so a diagnosed run arrives diagnosed."""

from __future__ import annotations

from pathlib import Path

import duckdb

from infbench.store.transfer import TABLES

EXPORT_FORMATS = ("parquet", "csv")


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def export_run(con: duckdb.DuckDBPyConnection, run_id: str, out_dir: Path, fmt: str) -> list[Path]:
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"format: {fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    opts = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT csv, HEADER true)"
    files = []
    for table in TABLES:
        path = out_dir / f"{table}.{fmt}"
        order = "" if table == "runs" else " ORDER BY 1, 2"
        # COPY streams to the file without materialising the table in Python.
        con.execute(f"COPY (SELECT * FROM {table} WHERE run_id = {_lit(run_id)}{order}) "
                    f"TO {_lit(str(path))} {opts}")
        files.append(path)
    return files
