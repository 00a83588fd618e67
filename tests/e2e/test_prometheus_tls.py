"""The Prometheus client over TLS against a real Prometheus serving https with a certificate
made here (openssl): verified with --prometheus-ca-file, refused without it, accepted with
--prometheus-insecure; and `infbench metrics pull` says which in one line."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from infbench.store import create_run, finish_run, open_store
from probes.prometheus import PrometheusClient, PrometheusError
from tests.support.cli import infbench
from tests.support.prometheus import PrometheusServer, running_prometheus, tool

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tls_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, Path]]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run([tool("openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    with running_prometheus({}, d / "prom", tls=(cert, key)) as prom:
        yield prom, cert


def test_verified_with_the_ca_refused_without_it_accepted_insecure(
        tls_prom: tuple[PrometheusServer, Path]) -> None:
    prom, cert = tls_prom
    assert prom.url.startswith("https://")
    ok = PrometheusClient(prom.url, ca_file=cert).query("1 + 1")
    assert ok.series[0].values[0][1] == 2.0
    with pytest.raises(PrometheusError) as err:
        PrometheusClient(prom.url).query("1")
    assert err.value.kind == "tls" and "certificate" in str(err.value).lower()
    assert PrometheusClient(prom.url, insecure=True).query("3").series[0].values[0][1] == 3.0


def test_metrics_pull_names_the_tls_failure(tls_prom: tuple[PrometheusServer, Path],
                                            tmp_path: Path) -> None:
    prom, cert = tls_prom
    db = tmp_path / "t.duckdb"
    con = open_store(db)
    create_run(con, run_id="r", config={}, target_url="http://127.0.0.1:9", model="m",
               endpoint="completions", t0_monotonic_ns=0)
    finish_run(con, "r", status="completed", summary={"warnings": []})
    con.close()
    r = infbench("metrics", "pull", "r", "--prometheus", prom.url, "--db", str(db))
    assert r.returncode == 1 and "tls: TLS:" in r.stderr and "certificate" in r.stderr, r.stderr
    # With the CA the server is used: nothing matches this made-up run's target, so empty.
    r = infbench("metrics", "pull", "r", "--prometheus", prom.url, "--db", str(db),
                 "--ca-file", str(cert))
    assert r.returncode == 1 and "no series matched" in r.stderr, r.stderr
    assert "tls" not in r.stderr.lower()
