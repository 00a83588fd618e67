"""The reference engine as a GPU you can break, seen the ways a user sees a real one: its
dcgm-exporter series on /metrics scraped by a real Prometheus (/usr/bin/prometheus) and read
back for the run's window into gpu_samples (`infbench metrics pull`), next to the engine's
own step log. A thermal throttle shows as a low SM clock with its reason and heat, and makes
prefill steps slower by the clock ratio while decode steps barely move; a PCIe link trained
low and a recoverable XID show in the other engine's telemetry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.e2e.engine_process import EngineProcess, running_engine
from tests.support.cli import infbench
from tests.support.prometheus import PrometheusServer, running_prometheus

pytestmark = pytest.mark.e2e

THROTTLE = "throttle:reason=thermal,sm_clock_mhz=1320"  # 1980/1320 = 1.5x on compute


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EngineProcess, EngineProcess, PrometheusServer]]:
    with running_engine("--fault", THROTTLE) as hot, \
            running_engine("--fault", "pcie:gen=3,width=8", "--fault", "xid:code=63,at_s=1") as cool:
        targets = [":".join(map(str, e.host_port)) for e in (hot, cool)]
        with running_prometheus({"engine": targets}, tmp_path_factory.mktemp("prom"), interval_s=0.5) as prom:
            assert prom.wait_for('up{job="engine"} == 1'), prom.log.read_text()[-2000:]
            yield hot, cool, prom


def _q(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _run(engine: EngineProcess, prom: PrometheusServer, db: Path) -> str:
    r = infbench("run", "--url", engine.url, "--db", str(db), "--json", "--quiet",
                 "--arrival", "closed", "--concurrency", "6", "--num-requests", "36",
                 "--input-tokens", "uniform:1500:2500", "--output-tokens", "uniform:24:48",
                 "--scrape-interval", "0.5", "--prometheus", prom.url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["prometheus"]["families"]["dcgm"] > 0 and doc["prometheus"]["gpu_samples"] > 0, doc
    (run_id,) = _q(db, "SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 1")[0]
    return run_id


def test_thermal_throttle_in_telemetry_and_in_step_times(stack, tmp_path: Path) -> None:
    hot, cool, prom = stack
    db = tmp_path / "g.duckdb"
    hot_run = _run(hot, prom, db)
    cool_run = _run(cool, prom, db)
    host, port = hot.host_port
    hot_inst = f"{host}:{port}"
    cool_inst = ":".join(map(str, cool.host_port))
    # Samples while the device worked (util > 0): the clock, its reason and the heat.
    busy = _q(db, "SELECT instance, sm_clock_mhz, sm_clock_max_mhz, clock_event_names, temperature_c, "
                  "util_gpu_pct FROM gpu_samples WHERE run_id = ? AND source = 'dcgm' AND util_gpu_pct > 0 "
                  "AND instance = ?", [hot_run, hot_inst])
    assert len(busy) >= 3, busy
    assert {(b[1], b[2]) for b in busy} == {(1320.0, 1980.0)}
    assert all("sw_thermal_slowdown" in b[3] for b in busy)
    assert min(b[4] for b in busy) >= 87
    # The healthy-clocked engine: full clock, no reason under load; its link and XID show.
    cool_busy = _q(db, "SELECT sm_clock_mhz, clock_event_names, pcie_gen, pcie_gen_max, pcie_width, "
                       "pcie_width_max FROM gpu_samples WHERE run_id = ? AND source = 'dcgm' AND util_gpu_pct > 0 "
                       "AND instance = ?", [cool_run, cool_inst])
    assert cool_busy and {c[:2] for c in cool_busy} == {(1980.0, "")}
    assert {c[2:] for c in cool_busy} == {(3, 5, 8, 16)}
    xids = _q(db, "SELECT DISTINCT xid, ecc_corrected FROM gpu_samples WHERE run_id = ? "
                  "AND source = 'dcgm' AND instance = ? AND t_ns > 0", [cool_run, cool_inst])
    assert (63, 1) in xids
    # Behaviour: prefill-only steps (compute-bound at 1500+ tokens) take the clock ratio longer,
    # decode-only steps (HBM-bound) hardly longer.
    def med(run: str, where: str) -> float:
        (v,) = _q(db, f"SELECT median((end_s - start_s) / {('prefill_tokens' if 'prefill_tokens >' in where else '1')}) "
                      f"FROM engine_steps WHERE run_id = ? AND {where}", [run])[0]
        assert v is not None, where
        return float(v)
    prefill_only = "prefill_tokens > 1000 AND decode_seqs = 0"
    decode_only = "prefill_tokens = 0 AND decode_seqs BETWEEN 4 AND 6"
    ratio_prefill = med(hot_run, prefill_only) / med(cool_run, prefill_only)
    ratio_decode = med(hot_run, decode_only) / med(cool_run, decode_only)
    assert 1.3 < ratio_prefill < 1.6, ratio_prefill
    assert ratio_decode < 1.2, ratio_decode


def test_a_second_pull_replaces_the_rows(stack, tmp_path: Path) -> None:
    hot, _, prom = stack
    db = tmp_path / "h.duckdb"
    run_id = _run(hot, prom, db)
    count = "SELECT count(*), count(DISTINCT (instance, gpu, t_ns)) FROM gpu_samples WHERE run_id = ? AND source = 'dcgm'"
    (n1, d1), = _q(db, count, [run_id])
    p = infbench("metrics", "pull", run_id, "--prometheus", prom.url, "--db", str(db), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["gpu_samples"] > 0
    (n2, d2), = _q(db, count, [run_id])
    assert n1 == d1 and n2 == d2  # never two rows for one GPU at one instant
