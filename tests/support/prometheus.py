"""A real Prometheus server (Debian's `prometheus` package) scraping loopback targets.

`running_prometheus({"engine": ["127.0.0.1:8001"]}, tmp_path, interval_s=0.5)` writes a
config, starts `prometheus` on a free loopback port with its TSDB under `tmp_path`, waits
until it answers and yields a `PrometheusServer`; the process is ours and stopped on exit.
`.ci/run` installs the package; a machine without it fails the test with the reason.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.process import stop_process


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: install Debian's prometheus package (.ci/run does)"
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrometheusServer:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=10) as resp:
            return json.loads(resp.read())

    def query(self, expr: str) -> list[dict[str, Any]]:
        doc = self.api("query", query=expr)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def wait_for(self, expr: str, timeout_s: float = 30.0, series: int = 1) -> list[dict[str, Any]]:
        """Poll an instant query until it returns at least `series` series."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if len(result) >= series or time.monotonic() > deadline:
                return result
            time.sleep(0.2)

    def wait_scraped_after(self, unix_s: float, timeout_s: float = 15.0) -> None:
        """Until every active target has been scraped after `unix_s`."""
        deadline = time.monotonic() + timeout_s
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            targets = self.api("targets")["data"]["activeTargets"]
            last = [t.get("lastScrape", "") for t in targets]
            if targets and all(
                    x and datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp() > unix_s
                    for x in last):
                return
            time.sleep(0.2)
        raise AssertionError(f"targets not scraped after {unix_s}: {targets}")


def write_config(path: Path, jobs: dict[str, list[str]], interval_s: float) -> None:
    ms = round(interval_s * 1000)  # Prometheus durations take no fractions ("500ms")
    lines = [f"global: {{scrape_interval: {ms}ms, scrape_timeout: {ms}ms}}",
             "scrape_configs:"]
    for job, targets in jobs.items():
        quoted = ", ".join(f"'{t}'" for t in targets)
        lines.append(f"  - job_name: {job}\n    static_configs: [{{targets: [{quoted}]}}]")
    path.write_text("\n".join(lines) + "\n")


@contextlib.contextmanager
def running_prometheus(jobs: dict[str, list[str]], workdir: Path, interval_s: float = 0.5,
                       tls: tuple[Path, Path] | None = None) -> Iterator[PrometheusServer]:
    """`tls` = (certificate, key): serve the API over https with them (web config file)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "prometheus.yml"
    write_config(cfg, jobs, interval_s)
    port = free_port()
    log = workdir / "prometheus.log"
    args = [tool("prometheus"), f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}"]
    context = None
    if tls is not None:
        web = workdir / "web.yml"
        web.write_text(f"tls_server_config:\n  cert_file: {tls[0]}\n  key_file: {tls[1]}\n")
        args.append(f"--web.config.file={web}")
        context = ssl.create_default_context(cafile=str(tls[0]))
    with log.open("wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT)
    scheme = "https" if tls else "http"
    server = PrometheusServer(f"{scheme}://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError("prometheus exited:\n" + log.read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2,
                                            context=context) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus not ready in 60 s:\n" + log.read_text()[-3000:])
            time.sleep(0.2)
        yield server
    finally:
        stop_process(proc, timeout_s=10)
