"""The commands' shared refusal and store opening: one line (the one `fail` every command
uses), exit 2, the connection closed
however the block ends (a real DuckDB store file)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
import typer

from infbench.command_support import fail, one_line, store_or_exit
from infbench.exit_codes import USAGE


def test_fail_prints_one_line_and_keeps_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    exc = fail("bad.duckdb: cannot open the store\nHINT: a second line\n", code=7)
    assert isinstance(exc, typer.Exit) and exc.exit_code == 7
    err = capsys.readouterr().err
    # one line: the break is written as a backslash and n, and what follows it is kept (a
    # path or run id the user typed may hold a line break; cutting there lost what was wrong)
    assert err == "error: bad.duckdb: cannot open the store\\nHINT: a second line\n"
    assert fail("x").exit_code == USAGE == 2


@pytest.mark.parametrize("message, line", [
    ("/tmp/a\nb.json: no such file", "/tmp/a\\nb.json: no such file"),
    ("run 'x': windows\r\nline", "run 'x': windows\\r\\nline"),
    ("  padded\n\n", "padded"),
    ("[bold]not markup[/]", "[bold]not markup[/]"),
])
def test_one_line_keeps_everything_on_one_line(message: str, line: str) -> None:
    assert one_line(message) == line and "\n" not in one_line(message)


def test_fail_prints_user_input_literally(capsys: pytest.CaptureFixture[str]) -> None:
    fail("--url: [red]x[/red]\nsecond")
    assert capsys.readouterr().err == "error: --url: [red]x[/red]\\nsecond\n"


def test_a_missing_store_read_only_is_refused_before_the_block(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ran = []
    with pytest.raises(typer.Exit) as info, store_or_exit(tmp_path / "none.duckdb", read_only=True):
        ran.append(1)
    assert info.value.exit_code == 2 and not ran
    err = capsys.readouterr().err
    assert "none.duckdb: no such store" in err and err.count("\n") == 1
    assert not (tmp_path / "none.duckdb").exists()


def test_a_file_that_is_not_a_store_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.duckdb"
    bad.write_text("not a database\n")
    with pytest.raises(typer.Exit) as info, store_or_exit(bad):
        pass
    assert info.value.exit_code == 2 and capsys.readouterr().err.startswith("error: ")


def test_the_connection_is_closed_when_the_block_ends_or_raises(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with store_or_exit(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    with pytest.raises(duckdb.ConnectionException):
        con.execute("SELECT 1")
    with pytest.raises(RuntimeError, match="boom"), store_or_exit(db, read_only=True) as con2:
        raise RuntimeError("boom")
    with pytest.raises(duckdb.ConnectionException):
        con2.execute("SELECT 1")
    # Closed means released: a writer can open the file again at once.
    with store_or_exit(db) as con3:
        con3.execute("SELECT 1").fetchone()
