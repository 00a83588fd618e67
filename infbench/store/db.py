"""Opening a store file: create it, migrate an older schema, refuse a newer or foreign one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb

from infbench.store.schema import MIGRATIONS, Migration


class StoreError(Exception):
    """A store that cannot be used as asked; the message is one line naming the file."""


def _current_version(con: duckdb.DuckDBPyConnection) -> int | None:
    # Every command opens the store: duckdb_tables() answers in a few ms where
    # information_schema's view over it costs tens of ms on a cold connection.
    row = con.execute("SELECT count(*), bool_or(table_name = 'schema_version') FROM duckdb_tables() "
                      "WHERE database_name = current_database()").fetchone()
    if not row or not row[1]:
        return None if row and row[0] else 0
    row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def open_store(
    path: str | Path,
    *,
    read_only: bool = False,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> duckdb.DuckDBPyConnection:
    """Open (creating or migrating) the store at `path`; the caller closes the connection."""
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"{path}: no such store (run `infbench run --db {path}` first)")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    # IOException: another process holds the file; ConnectionException: this one does.
    except (duckdb.IOException, duckdb.ConnectionException) as exc:
        first = str(exc).splitlines()[0]
        raise StoreError(f"{path}: cannot open the store ({first})") from exc
    try:
        _migrate(con, path, migrations, read_only)
    except _OlderSchema as older:
        # A reading command on a store an older infbench wrote: migrate it once (additive,
        # in one transaction), then read. Upgrading infbench must not make `runs` fail.
        con.close()
        try:
            open_store(path, migrations=migrations).close()
        except StoreError as exc:
            raise StoreError(
                f"{path}: schema version {older.version} is older than {older.latest} and "
                f"could not be migrated: {str(exc).removeprefix(f'{path}: ')}") from exc
        return open_store(path, read_only=True, migrations=migrations)
    except BaseException:
        con.close()
        raise
    return con


class _OlderSchema(Exception):
    def __init__(self, version: int, latest: int) -> None:
        super().__init__(version, latest)
        self.version, self.latest = version, latest


def _migrate(
    con: duckdb.DuckDBPyConnection, path: Path, migrations: Sequence[Migration], read_only: bool
) -> None:
    latest = migrations[-1].version
    version = _current_version(con)
    if version is None:
        raise StoreError(f"{path}: not an infbench store (it has tables but no schema_version)")
    if version > latest:
        raise StoreError(
            f"{path}: schema version {version} was written by a newer infbench "
            f"(this one reads up to {latest}); upgrade infbench to read it"
        )
    if version == latest:
        return
    if read_only:
        raise _OlderSchema(version, latest)
    # All pending migrations apply in one transaction: a failure leaves the file as it was.
    con.execute("BEGIN TRANSACTION")
    try:
        if version == 0:
            con.execute(
                "CREATE TABLE schema_version (version INTEGER NOT NULL, "
                "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp, description VARCHAR)"
            )
        for m in migrations:
            if m.version <= version:
                continue
            for stmt in m.statements:
                con.execute(stmt)
            con.execute(
                "INSERT INTO schema_version (version, description) VALUES (?, ?)",
                [m.version, m.description],
            )
        con.execute("COMMIT")
    except Exception as exc:
        con.execute("ROLLBACK")
        raise StoreError(f"{path}: migration to schema version {latest} failed: {exc}") from exc


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    version = _current_version(con)
    return version or 0
