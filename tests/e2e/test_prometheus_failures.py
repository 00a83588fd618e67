"""`infbench run --prometheus` against Prometheus servers that fail: one that answers every
query with an API error, one slower than the timeout, and none at all. The run completes
with every request stored, its status and exit code as without Prometheus, and one warning
in the summary naming what went wrong; a bearer token reaches the server and nothing else.
The target is the known-schedule test server (the engine is not what is tested here)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.support.cli import infbench
from tests.support.http_stub import StubServer
from tests.support.process import sse_server
from tests.support.prometheus import free_port
from tests.support.store_rows import store_rows

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with sse_server("--ttft-ms", "3", "--itl-ms", "1") as url:
        yield url


def _run(url: str, db: Path, *args: str) -> tuple[dict, str]:
    r = infbench("run", "--url", url, "--db", str(db), "--json", "--quiet", "--rate", "40",
                 "--num-requests", "12", "--output-tokens", "8", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


class _FakePrometheus(BaseHTTPRequestHandler):
    """Answers every API call the way a broken server would (mode set per server)."""

    mode = "error"
    seen_auth: list[str] = []

    def _answer(self) -> None:
        type(self).seen_auth.append(self.headers.get("Authorization", ""))
        if self.mode == "slow":
            time.sleep(3.0)
        if self.mode == "error":
            body = json.dumps({"status": "error", "errorType": "execution",
                               "error": "query processing would load too many samples"})
            self.send_response(422)
        else:
            body = json.dumps({"status": "success", "data": {"activeTargets": []}})
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_prometheus(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("H", (_FakePrometheus,), {"mode": request.param, "seen_auth": []})
    srv = StubServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("fake_prometheus", ["error", "slow"], indirect=True)
def test_a_failing_prometheus_only_warns(target: str, fake_prometheus: tuple[str, type],
                                         tmp_path: Path) -> None:
    url, handler = fake_prometheus
    secret = "s3cr3t-token-value"
    (tmp_path / "tok").write_text(secret + "\n")
    db = tmp_path / "f.duckdb"
    summary, stderr = _run(target, db, "--prometheus", url,
                           "--prometheus-token-file", str(tmp_path / "tok"),
                           "--prometheus-timeout", "1")
    assert summary["completed"] == 12 and summary["status"] == "completed"
    (warning,) = [w for w in summary["warnings"] if "Prometheus" in w]
    expect = "execution: query processing" if handler.mode == "error" else "timeout"
    assert expect in warning and "client data is complete" in warning, warning
    assert store_rows(db, "SELECT count(*) FROM requests")[0][0] == 12
    assert store_rows(db, "SELECT status FROM prometheus_pulls") == [("failed",)]
    # The token went to the server and nowhere else.
    assert f"Bearer {secret}" in handler.seen_auth
    assert secret not in db.read_bytes().decode("latin-1") and secret not in stderr
    assert secret not in json.dumps(summary)


def test_an_unreachable_prometheus_only_warns(target: str, tmp_path: Path) -> None:
    db = tmp_path / "u.duckdb"
    summary, _ = _run(target, db, "--prometheus", f"http://127.0.0.1:{free_port()}")
    assert summary["completed"] == 12 and summary["status"] == "completed"
    (warning,) = [w for w in summary["warnings"] if "Prometheus" in w]
    assert "unreachable" in warning and "no server series stored" in warning, warning
    assert store_rows(db, "SELECT count(*) FROM requests WHERE error_class IS NULL")[0][0] == 12
