"""The infbench store: one DuckDB file, a versioned schema, bulk batched ingest.

See `infbench.store.schema` for the tables and what every column means.
"""

from infbench.store.db import StoreError, open_store, schema_version
from infbench.store.runs import (
    RUN_STATUSES,
    RunRow,
    create_run,
    finish_run,
    get_run,
    list_runs,
    new_run_id,
)
from infbench.store.schema import BULK_TABLES, MIGRATIONS, SCHEMA_VERSION, Migration
from infbench.store.writer import BatchWriter, ColumnBuffer

__all__ = [
    "BULK_TABLES",
    "MIGRATIONS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "BatchWriter",
    "ColumnBuffer",
    "Migration",
    "RunRow",
    "StoreError",
    "create_run",
    "finish_run",
    "get_run",
    "list_runs",
    "new_run_id",
    "open_store",
    "schema_version",
]
