"""The test HTTP peer: a handler whose client hung up leaves nothing behind. CI stop 38 failed
a CLI test because another test's timed-out handler printed a Broken pipe traceback into the
stderr CliRunner was capturing a moment later."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from tests.support.http_stub import QuietHandler, serve

ROOT = Path(__file__).resolve().parents[3]


class Late(QuietHandler):
    delay_s = 0.0
    started = threading.Event()
    done: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.started.set()
        time.sleep(self.delay_s)
        try:
            for _ in range(50):  # past the kernel's buffer, so the hung-up peer is noticed
                self.send_body(200, "x" * 4096)
        except ConnectionError as e:
            type(self).done.append(type(e).__name__)
            raise
        type(self).done.append("answered")


@pytest.mark.parametrize("delay_s", [0.15, 0.4])
def test_a_handler_whose_client_hung_up_prints_nothing_and_ends_with_the_server(
        capsys: pytest.CaptureFixture[str], delay_s: float) -> None:
    before = set(threading.enumerate())
    with serve(Late, delay_s=delay_s, done=[], started=threading.Event()) as (url, h):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            # hang up once the handler has the request (a busy host may not have accepted it yet)
            assert h.started.wait(30)
    # it wrote to the hung-up client, and the server waited for it to finish
    assert h.done in (["BrokenPipeError"], ["ConnectionResetError"])
    # no thread the server started outlives it (compared by identity, not by count: a thread
    # an earlier test in this worker left ending meanwhile made the count 9 against 10, R73)
    assert [t.name for t in set(threading.enumerate()) - before] == []
    out = capsys.readouterr()
    assert out.err == "" and out.out == ""


def test_every_test_http_peer_is_the_stub_server() -> None:
    direct = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
              if "ThreadingHTTPServer(" in p.read_text() and p.name != "http_stub.py"
              and p.name != Path(__file__).name]
    assert direct == [], f"start HTTP peers with tests.support.http_stub (StubServer): {direct}"
