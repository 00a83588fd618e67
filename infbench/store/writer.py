"""Bulk ingest while a run goes on: column batches → Arrow → DuckDB, off the event loop.

Rows are never inserted one by one. Producers append to a `ColumnBuffer` (plain Python lists,
one per column) and hand full buffers to a `BatchWriter`, whose thread turns each into an
Arrow table and inserts it with a single INSERT ... SELECT. The queue between them is bounded,
so a writer that falls behind slows the producer instead of letting memory grow.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from infbench.store.arrays import table as arrow_table
from infbench.store.schema import BULK_TABLES

_STOP = object()


class ColumnBuffer:
    """Rows for one table kept column-wise; `take()` hands them over and starts afresh."""

    def __init__(self, table: str) -> None:
        self.table = BULK_TABLES[table]
        self.columns: dict[str, list[Any]] = {c: [] for c in self.table.batch_columns}

    def __len__(self) -> int:
        first = next(iter(self.columns.values()))
        return len(first)

    def append(self, row: dict[str, Any]) -> None:
        for name, col in self.columns.items():
            col.append(row.get(name))

    def extend(self, cols: dict[str, list[Any]]) -> None:
        """Append equal-length column lists; columns not given are filled with NULL."""
        n = len(next(iter(cols.values())))
        for name, col in self.columns.items():
            values = cols.get(name)
            if values is None:
                col.extend([None] * n)
            else:
                if len(values) != n:
                    raise ValueError(f"{self.table.name}.{name}: {len(values)} values, expected {n}")
                col.extend(values)

    def take(self) -> dict[str, list[Any]]:
        out = self.columns
        self.columns = {c: [] for c in self.table.batch_columns}
        return out


_NUMPY = {"BIGINT": np.int64, "INTEGER": np.int32, "DOUBLE": np.float64, "BOOLEAN": np.bool_}


class ArrayBuffer:
    """Rows for a numeric table kept as NumPy column pieces (the per-chunk path).

    Appending a request's chunk columns costs one array conversion per column instead of a
    Python object per value, and the writer hands whole arrays to Arrow without a per-value
    loop, so neither the producer nor the writer thread holds the GIL for long.
    Ownership: the producer appends; `take()` hands the concatenated columns to the writer.
    """

    def __init__(self, table: str) -> None:
        self.table = BULK_TABLES[table]
        types = dict(self.table.columns)
        missing = [c for c in self.table.batch_columns if types[c] not in _NUMPY]
        if missing:
            raise ValueError(f"{table}: column(s) {', '.join(missing)} are not numeric")
        self._dtypes = {c: _NUMPY[types[c]] for c in self.table.batch_columns}
        self._pieces: dict[str, list[np.ndarray]] = {c: [] for c in self._dtypes}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def extend(self, cols: dict[str, Any]) -> None:
        """Append equal-length columns (arrays or lists); every column must be given."""
        n = len(next(iter(cols.values())))
        for name, dtype in self._dtypes.items():
            if name not in cols:
                raise ValueError(f"{self.table.name}.{name}: missing column")
            arr: np.ndarray = np.asarray(cols[name], dtype=dtype)
            if arr.shape != (n,):
                raise ValueError(f"{self.table.name}.{name}: {arr.shape[0] if arr.ndim else 0} values, expected {n}")
            self._pieces[name].append(arr)
        self._n += n

    def take(self) -> dict[str, np.ndarray]:
        out = {c: (np.concatenate(p) if p else np.empty(0, self._dtypes[c])) for c, p in self._pieces.items()}
        self._pieces = {c: [] for c in self._dtypes}
        self._n = 0
        return out


def to_arrow(table: str, columns: dict[str, list[Any]]) -> pa.Table:
    """Columns not given become NULL; a column the table does not have is an error."""
    schema = BULK_TABLES[table].arrow_schema()
    unknown = set(columns) - set(schema.names)
    if unknown:
        raise ValueError(f"{table}: no such column(s) {', '.join(sorted(unknown))}")
    return arrow_table(columns, schema)


def insert_batch(
    cur: duckdb.DuckDBPyConnection, run_id: str, table: str, batch: pa.Table
) -> None:
    cols = BULK_TABLES[table].batch_columns
    cur.register("_infbench_batch", batch)
    try:
        cur.execute(
            f"INSERT INTO {table} (run_id, {', '.join(cols)}) "
            f"SELECT ?::VARCHAR, {', '.join(cols)} FROM _infbench_batch",
            [run_id],
        )
    finally:
        cur.unregister("_infbench_batch")


class BatchWriter:
    """A thread that bulk-inserts batches for one run.

    Ownership: the caller keeps `con` open until `close()` returns; the writer opens and
    closes its own cursor. A batch passed to `put()` belongs to the writer from then on.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, run_id: str, max_pending: int = 4) -> None:
        self.run_id = run_id
        self.rows_written: dict[str, int] = {t: 0 for t in BULK_TABLES}
        self._cur = con.cursor()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="infbench-store-writer", daemon=True)
        self._thread.start()

    def put(self, table: str, columns: dict[str, Any]) -> None:
        """Queue a batch; blocks while `max_pending` batches wait (back-pressure)."""
        if self._error is not None:
            raise RuntimeError(f"store writer failed: {self._error}") from self._error
        if columns and len(next(iter(columns.values()))):
            self._queue.put((table, columns))

    def put_buffer(self, buf: ColumnBuffer | ArrayBuffer) -> None:
        if len(buf):
            self.put(buf.table.name, buf.take())

    def put_table(self, table: str, batch: pa.Table) -> None:
        """Queue a batch that is already Arrow (a worker's shipped batch, `loadgen.workers`);
        its columns are matched by name and must be among the table's."""
        if self._error is not None:
            raise RuntimeError(f"store writer failed: {self._error}") from self._error
        unknown = set(batch.column_names) - set(BULK_TABLES[table].batch_columns)
        if unknown:
            raise ValueError(f"{table}: no such column(s) {', '.join(sorted(unknown))}")
        if batch.num_rows:
            self._queue.put((table, batch))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if self._error is not None:
                continue  # drain so producers never block on a dead writer
            table, columns = item
            try:
                batch = columns if isinstance(columns, pa.Table) else to_arrow(table, columns)
                insert_batch(self._cur, self.run_id, table, batch)
                self.rows_written[table] += batch.num_rows
            except BaseException as exc:  # kept and re-raised in the producer's thread
                self._error = exc

    def close(self) -> None:
        """Write everything queued, stop the thread, close the cursor; re-raise a write error."""
        self._queue.put(_STOP)
        self._thread.join()
        self._cur.close()
        if self._error is not None:
            raise RuntimeError(f"store writer failed: {self._error}") from self._error
