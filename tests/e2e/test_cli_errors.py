"""Every command, given bad input or a file it cannot use, says so in one line and exits with
the documented code; nothing already stored is lost. Runs the real CLI in a subprocess, so the
process boundary (exit code, what reaches stderr) is what a user or a CI job sees."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from infbench.store import open_store
from tests.support.cli import infbench
from tests.support.http_stub import StubServer

pytestmark = pytest.mark.e2e

USAGE = 2


def _synthetic_store(path: Path) -> None:
    from tests.support.synthetic_runs import write_timeline

    con = open_store(path)
    write_timeline(con, requests=8, concurrency=4, tokens=24)
    con.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli")
    good = d / "good.duckdb"
    _synthetic_store(good)
    truncated = d / "truncated.duckdb"
    data = good.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    empty = d / "empty.duckdb"
    empty.write_bytes(b"")
    garbage = d / "garbage.duckdb"
    garbage.write_bytes(b"not a database\n" * 64)
    a_file = d / "a_file"
    a_file.write_text("x")
    a_dir = d / "a_dir"
    a_dir.mkdir()
    rules = d / "bad.toml"
    rules.write_text("[rule\n")
    return {"good": good, "truncated": truncated, "empty": empty, "garbage": garbage,
            "file": a_file, "dir": a_dir, "missing": d / "missing" / "x", "rules": rules,
            "newline": d / "no\nsuch.json"}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


CASES = [
    # (argv with {placeholders}, what the one line must name)
    (["runs", "--db", "{truncated}"], "store"),
    (["runs", "--db", "{empty}"], "empty.duckdb"),
    (["runs", "--db", "{garbage}"], "garbage.duckdb"),
    (["runs", "--db", "{dir}"], "a_dir"),
    (["runs", "--db", "{missing}"], "no such store"),
    (["show", "last", "--db", "{truncated}"], "store"),
    (["show", "no-such-run", "--db", "{good}"], "no-such-run"),
    (["diagnose", "stalls", "last", "--db", "{truncated}"], "store"),
    (["diagnose", "stalls", "last", "--db", "{garbage}"], "garbage.duckdb"),
    (["report", "last", "--db", "{good}", "--html", "{missing}"], "missing"),
    (["report", "last", "--db", "{good}", "--html", "{dir}"], "a_dir"),
    (["export", "last", "--db", "{good}", "--out", "{file}/sub"], "a_file"),
    (["import", "{file}", "--db", "{good}"], "a_file"),
    (["import", "{dir}", "--db", "{good}"], "a_dir"),
    (["gate", "--baseline", "last", "--candidate", "last", "--db", "{good}",
      "--markdown", "{missing}"], "missing"),
    (["gate", "--baseline", "last", "--candidate", "last", "--db", "{good}",
      "--rules", "{rules}"], "bad.toml"),
    (["gate", "--baseline", "last", "--candidate", "last", "--db", "{good}",
      "--junit", "{dir}"], "a_dir"),
    (["run", "--url", "http://127.0.0.1:9", "--input-tokens", "uniform:100:10"],
     "'uniform:100:10'"),
    (["run", "--url", "http://127.0.0.1:9", "--output-tokens", "normal:[bold]:1"],
     "normal:[bold]:1"),
    (["run", "--url", "http://127.0.0.1:9", "--db", "{dir}"], "a_dir"),
    (["plan", "memory", "-m", "no-such-model", "-g", "h100"], "no-such-model"),
    (["run", "--no-such-option"], "--no-such-option"),
    (["run", "--rate", "fast"], "--rate"),
    (["sweep", "--duration", "-"], "--duration"),
    (["show"], "run_id"),
    (["no-such-command"], "no-such-command"),
    (["gate", "noise", "--rules"], "--rules"),
    # A line break in a path the user gave: the whole path in the one line, the break written
    # as a backslash and n (`import --from` printed two lines, `diagnose startup` cut the
    # line at the break and lost what was wrong).
    (["import", "--from", "guidellm", "{newline}", "--db", "{good}"], "no\\nsuch.json: "),
    (["diagnose", "startup", "{newline}", "--db", "{good}"], "no\\nsuch.json: cannot read it"),
]


@pytest.mark.parametrize(("argv", "names"), CASES, ids=[" ".join(c[0][:2]) + f"-{i}"
                                                        for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(files: dict[str, Path], argv: list[str],
                                                        names: str) -> None:
    before = _digest(files["good"])
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    r = infbench(*args)
    assert r.returncode == USAGE, (args, r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and names in lines[0], lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    assert _digest(files["good"]) == before  # nothing already stored was touched


class _Html(BaseHTTPRequestHandler):
    """A web server that is not an inference server: HTML for everything."""

    def _page(self) -> None:
        body = b"<html><body>Welcome to nginx!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._page()

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._page()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    srv = StubServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@contextlib.contextmanager
def _garbage_server() -> Iterator[str]:
    """Something on the port that does not speak HTTP at all."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    stop = threading.Event()

    def loop() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\x00\x01garbage\r\n\r\n")
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(2)
        sock.close()


def test_targets_that_are_not_inference_servers_are_named_in_words(tmp_path: Path) -> None:
    with _serve(_Html) as url:
        r = infbench("run", "--url", url, "--db", str(tmp_path / "h.duckdb"))
        assert r.returncode == USAGE, r.stderr
        assert "not with a JSON model list" in r.stderr and "Welcome to nginx" in r.stderr
        r = infbench("run", "--url", url, "--model", "m", "--db", str(tmp_path / "h.duckdb"))
    assert r.returncode == USAGE, r.stderr
    assert "not with a JSON completion" in r.stderr and "Welcome to nginx" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) >= 1
    with _garbage_server() as url:
        r = infbench("run", "--url", url, "--db", str(tmp_path / "g.duckdb"))
    assert r.returncode == USAGE, r.stderr
    assert "Error" not in r.stderr.replace("error:", ""), r.stderr  # no exception class names
    assert url in r.stderr
    assert not (tmp_path / "h.duckdb").exists() and not (tmp_path / "g.duckdb").exists()


@pytest.mark.parametrize(("url", "says"), [
    ("localhost:8000", "did you mean http://localhost:8000"),
    ("ftp://127.0.0.1:1", "not an http:// or https:// URL"),
    ("http://127.0.0.1:1/?q=1", "without ?query"),
])
def test_urls_that_are_not_http_base_urls(url: str, says: str, tmp_path: Path) -> None:
    r = infbench("run", "--url", url, "--db", str(tmp_path / "u.duckdb"))
    assert r.returncode == USAGE and says in r.stderr and "Traceback" not in r.stderr
