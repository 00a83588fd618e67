"""A small HTTP server on 127.0.0.1 whose answers a unit test writes (good, bad, slow), for
clients that must be tested against a peer misbehaving on purpose.

`serve(MyHandler, answers={})` starts a thread serving a fresh subclass of `MyHandler` that
holds the given class attributes as its own, so what one test records or sets up never
leaks into another; it yields `(url, subclass)` and on exit shuts the server down, waits for
its handlers to finish and closes its socket.

Every HTTP peer a test starts goes through `serve` (or `StubServer`): a handler that outlives
its test prints into whatever the next test captures (CliRunner swaps the process's
sys.stderr), which failed CI stop 38's `test_plan_specdec` with another test's Broken pipe.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

H = TypeVar("H", bound=BaseHTTPRequestHandler)


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that writes no access log and answers with `send_body`."""

    def send_body(self, status: int, doc: Any) -> None:
        """`doc` as the body: a str as it is (a proxy's HTML, plain text), anything else as JSON."""
        raw = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


class StubServer(ThreadingHTTPServer):
    """Handler threads are joined when the server closes, and a client that hung up is not an
    error: tests time clients out on purpose, and the handler then writes to a closed socket."""

    daemon_threads = False
    block_on_close = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(handler: type[H], **class_state: Any) -> Iterator[tuple[str, type[H]]]:
    cls = type(handler.__name__, (handler,), class_state)
    srv = StubServer(("127.0.0.1", 0), cls)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", cls
    finally:
        srv.shutdown()
        srv.server_close()
