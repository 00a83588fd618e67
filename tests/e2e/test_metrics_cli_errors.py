"""Bad input to `infbench metrics pull` and to `run`'s Prometheus and live-metrics options:
one line naming what was wrong, exit 2, nothing sent and no store touched."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from infbench.store import open_store
from tests.support.cli import infbench
from tests.support.synthetic_runs import write_timeline

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("m") / "good.duckdb"
    con = open_store(path)
    write_timeline(con, requests=4, concurrency=2, tokens=8)
    con.close()
    return path


def _one_line_exit_2(args: list[str], names: str, **env: str) -> None:
    r = infbench(*args, **env)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert len(lines) == 1 and names in lines[0], lines
    assert "Traceback" not in r.stderr


def test_metrics_pull_bad_input(good: Path, tmp_path: Path) -> None:
    truncated = tmp_path / "t.duckdb"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    prom = ["--prometheus", "http://127.0.0.1:9"]
    _one_line_exit_2(["metrics", "pull", "last", "--db", str(tmp_path / "none.duckdb"), *prom],
                     "none.duckdb")
    _one_line_exit_2(["metrics", "pull", "no-such-run", "--db", str(good), *prom], "no-such-run")
    _one_line_exit_2(["metrics", "pull", "last", "--db", str(truncated), *prom], "t.duckdb")
    _one_line_exit_2(["metrics", "pull", "last", "--db", str(good), "--prometheus", "prom:9090"],
                     "'prom:9090' is not an http(s) URL")
    _one_line_exit_2(["metrics", "pull", "last", "--db", str(good), *prom,
                      "--token-env", "INFBENCH_NO_SUCH_VAR"], "INFBENCH_NO_SUCH_VAR is not set")
    _one_line_exit_2(["metrics", "pull", "last", "--db", str(good), *prom, "--token-file",
                      str(tmp_path / "tok")], "token file")


def test_run_refuses_bad_prometheus_and_metrics_port_options(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    base = ["run", "--url", "http://127.0.0.1:9", "--db", str(db)]
    _one_line_exit_2([*base, "--prometheus", "http://u:pw@prom:9090"], "credentials")
    _one_line_exit_2([*base, "--prometheus", "http://prom:9090", "--prometheus-token-env",
                      "INFBENCH_NO_SUCH_VAR"], "INFBENCH_NO_SUCH_VAR is not set")
    _one_line_exit_2([*base, "--prometheus", "https://prom:9090", "--prometheus-ca-file",
                      str(tmp_path / "ca.pem")], "ca.pem")
    _one_line_exit_2([*base, "--metrics-port", "http"], "metrics-port")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        _one_line_exit_2([*base, "--metrics-port", str(port)], f"cannot listen on {port}")
    assert not db.exists()  # refused before the store was created
