"""The reference engine as a GPU you can break, seen the ways a user sees a real one: its
dcgm-exporter series on /metrics scraped by a real Prometheus (/usr/bin/prometheus) and read
back for the run's window into gpu_samples (`infbench metrics pull`), next to the engine's
own step log. A thermal throttle shows as a low SM clock with its reason and heat, and makes
prefill steps slower by the clock ratio while decode steps barely move; a PCIe link trained
low and a recoverable XID show in the other engine's telemetry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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


def _merge(db: Path, *parts: Path) -> None:
    """One store holding the runs of several (each run wrote its own file)."""
    con = duckdb.connect(str(db))
    try:
        for i, part in enumerate(parts):
            con.execute(f"ATTACH '{part}' AS p{i} (READ_ONLY)")
            for (table,) in con.execute(f"SELECT table_name FROM duckdb_tables() WHERE database_name = 'p{i}' "
                                        "AND table_name IN ('runs', 'gpu_samples', 'engine_steps')").fetchall():
                exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                                     "AND table_name = ?", [table]).fetchone()[0]
                verb = f"INSERT INTO {table} SELECT * FROM" if exists else f"CREATE TABLE {table} AS SELECT * FROM"
                con.execute(f"{verb} p{i}.{table}")
    finally:
        con.close()


def _run(engine: EngineProcess, prom: PrometheusServer, db: Path) -> str:
    # One request at a time: each starts with prefill-only steps, then decode-only ones, so
    # both kinds of step are measured alone (a mixed step would blur the comparison).
    r = infbench("run", "--url", engine.url, "--db", str(db), "--json", "--quiet",
                 "--arrival", "closed", "--concurrency", "1", "--num-requests", "16",
                 "--input-tokens", "uniform:1500:2000", "--output-tokens", "uniform:24:48",
                 "--scrape-interval", "0.5", "--prometheus", prom.url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["prometheus"]["families"]["dcgm"] > 0 and doc["prometheus"]["gpu_samples"] > 0, doc
    return str(doc["run_id"]) if "run_id" in doc else _q(db, "SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 1")[0][0]


def _predicted_ratios() -> tuple[float, float]:
    """What the sim's own model says for the steps this test measures (a 1750-token prefill
    alone, one sequence decoding at ~1800 tokens of context), with the engine's flags."""
    from reference_engine.__main__ import build_parser, config_from_args
    from reference_engine.engine import make_device
    from reference_engine.executor import SeqWork, StepBatch
    from reference_engine.faults import Faults
    from reference_engine.request import SamplingParams
    from reference_engine.sim_executor import SimExecutor
    from tests.e2e.engine_process import FAST_FLAGS

    def predict(fault: list[str], batch: StepBatch) -> float:
        cfg = config_from_args(build_parser().parse_args([*FAST_FLAGS, *fault]))
        f = Faults(cfg.faults)
        return SimExecutor(cfg, f.device_factor, f.collective_factor, make_device(cfg, f)).predict(batch)

    pre = StepBatch(1, [SeqWork(0, [65] * 1750, 0, [], True, SamplingParams(), 0)])
    dec = StepBatch(1, [SeqWork(0, [65], 1800, [], True, SamplingParams(), 5)])
    hot = ["--fault", THROTTLE]
    return predict(hot, pre) / predict([], pre), predict(hot, dec) / predict([], dec)


def test_thermal_throttle_in_telemetry_and_in_step_times(stack, tmp_path: Path) -> None:
    hot, cool, prom = stack
    db = tmp_path / "g.duckdb"
    # Both runs at once, so a busy neighbour slows both alike (they share this host's cores).
    with ThreadPoolExecutor(2) as pool:
        hot_f = pool.submit(_run, hot, prom, tmp_path / "hot.duckdb")
        cool_f = pool.submit(_run, cool, prom, tmp_path / "cool.duckdb")
        hot_run, cool_run = hot_f.result(), cool_f.result()
    _merge(db, tmp_path / "hot.duckdb", tmp_path / "cool.duckdb")
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
    decode_only = "prefill_tokens = 0 AND decode_seqs = 1"
    ratio_prefill = med(hot_run, prefill_only) / med(cool_run, prefill_only)
    ratio_decode = med(hot_run, decode_only) / med(cool_run, decode_only)
    want_prefill, want_decode = _predicted_ratios()
    print(f"throttled/healthy median step: prefill {ratio_prefill:.3f} (sim predicts "
          f"{want_prefill:.3f}), decode {ratio_decode:.3f} (predicts {want_decode:.3f})")
    # Host time (intake, a late wake-up the next step makes up) adds about the same absolute
    # time to both engines' steps, pulling the measured ratios toward 1: at least 60% of the
    # predicted prefill slowdown must show, and decode must stay well below prefill.
    assert 1 + 0.6 * (want_prefill - 1) < ratio_prefill < want_prefill + 0.15
    assert ratio_decode < want_decode + 0.06
    assert ratio_decode < ratio_prefill - 0.1


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


def test_gpu_probe_without_a_gpu_says_so_once_and_the_run_goes_on(stack, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    hot, _, _ = stack
    db = tmp_path / "n.duckdb"
    r = infbench("run", "--url", hot.url, "--db", str(db), "--json", "--quiet", "--gpu-probe",
                 "--num-requests", "4", "--input-tokens", "64", "--output-tokens", "8")
    if json.loads(r.stdout or "{}").get("gpu_probe"):
        pytest.skip("this host has an NVIDIA GPU: tests/device/gpu_probe_check.py covers it")
    assert r.returncode == 0, r.stderr
    probe_lines = [ln for ln in r.stderr.splitlines() if "GPU probe" in ln]
    assert len(probe_lines) == 1 and "GPU probe off: no NVIDIA driver here" in probe_lines[0]
    assert json.loads(r.stdout)["completed"] == 4
