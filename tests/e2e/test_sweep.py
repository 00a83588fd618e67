"""`infbench sweep` on the bundled engine: each point is a run linked to the sweep, and the
step-time line it fits lands on the roofline's for the same model and GPU."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.support.cli import infbench

pytestmark = pytest.mark.e2e


def test_sweep_knee_matches_roofline(tmp_path: Path) -> None:
    db, page = tmp_path / "s.duckdb", tmp_path / "sweep.html"
    r = infbench("sweep", "--db", str(db), "--mode", "concurrency", "--points", "1,8,24",
                 "--duration", "3", "--input-tokens", "2048", "--output-tokens", "32",
                 "--slo", "tpot=20ms", "--engine-arg=--max-num-seqs", "--engine-arg=64",
                 "--html", str(page), "--json", timeout=150)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [p["value"] for p in res["points"]] == [1, 8, 24]
    roof, line = res["roofline"], res["step_line"]
    assert line["source"] == "engine_steps"
    # The sim engine follows the roofline plus each kernel's floor, the half of its math the
    # weight stream does not hide, and a fixed 0.5 ms per step.
    # Messages carry the fit, so a failure on a noisy machine says what was measured.
    assert roof["slope_ratio"] == pytest.approx(1.0, abs=0.15), (roof, line)
    assert roof["measured_knee_batch_without_overhead"] == pytest.approx(
        roof["roofline_knee_batch"], rel=0.2), (roof, line)
    assert res["goodput_max"] is not None, res["points"]
    con = duckdb.connect(str(db), read_only=True)
    try:
        linked = con.execute("SELECT count(*) FROM sweep_points JOIN runs USING (run_id)").fetchone()[0]
    finally:
        con.close()
    assert linked == 3
    assert "infbenchCharts.renderAll" in page.read_text()


@pytest.mark.parametrize("max_num_seqs", [3, 6])
def test_auto_sweep_ramps_until_saturation_and_names_the_knee_below_it(
        tmp_path: Path, max_num_seqs: int) -> None:
    db, page = tmp_path / "a.duckdb", tmp_path / "auto.html"
    r = infbench("sweep", "--db", str(db), "--mode", "auto", "--num-rates", "1",
                 "--duration", "2", "--input-tokens", "256", "--output-tokens", "24",
                 f"--engine-arg=--max-num-seqs={max_num_seqs}", "--html", str(page), "--json",
                 timeout=240)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    conc = [p["value"] for p in res["points"] if p["kind"] == "concurrency"]
    # The engine runs at most max_num_seqs at once: past that, more clients only queue.
    assert conc == [2 ** i for i in range(len(conc))] and conc[-1] >= max_num_seqs
    assert conc[-1] <= 4 * max_num_seqs, res["saturation"]
    assert res["saturation"]["reached"], res["saturation"]
    assert res["knee"] is not None and res["knee"]["kind"] == "concurrency"
    assert res["knee"]["value"] <= max_num_seqs * 2
    assert sum(p["kind"] == "rate" for p in res["points"]) == 1
    assert "knee of the curve" in page.read_text()


def test_listed_points_below_the_knee_name_none(tmp_path: Path) -> None:
    r = infbench("sweep", "--db", str(tmp_path / "n.duckdb"), "--mode", "concurrency",
                 "--points", "1,2,4", "--duration", "2", "--input-tokens", "128",
                 "--output-tokens", "16", "--json", timeout=150)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert not res["saturation"]["reached"] and res["knee"] is None
    assert "raise the load" in res["saturation"]["reason"]


def test_each_point_is_recorded_as_a_run_is_and_the_key_is_sent_never_stored(tmp_path: Path) -> None:
    secret = "sk-infbench-sweep-4711"
    db = tmp_path / "k.duckdb"
    args = ("sweep", "--db", str(db), "--mode", "concurrency", "--points", "1,2", "--duration", "1.5",
            "--input-tokens", "128", "--output-tokens", "16", "--workload", "prefix",
            "--prefix-groups", "2", "--prefix-tokens", "64", "--json")
    # The bundled engine takes its key from VLLM_API_KEY: without the key a sweep is refused
    # before anything is stored; with --api-key every point is sent with it.
    r = infbench(*args, timeout=120, VLLM_API_KEY=secret)
    assert r.returncode == 2 and "API key" in r.stderr, r.stderr
    assert not db.exists()
    r = infbench(*args, "--api-key", secret, timeout=150, VLLM_API_KEY=secret)
    assert r.returncode == 0, r.stderr
    assert secret not in r.stdout + r.stderr
    assert secret.encode() not in db.read_bytes()
    points = _q(db, "SELECT p.run_id, r.config FROM sweep_points p JOIN runs r USING (run_id) "
                    "ORDER BY p.point_idx")
    assert len(points) == 2
    for run_id, config in points:
        cfg = json.loads(config)
        assert cfg["target"]["api_key_set"] is True
        # The workload options reach each point as given, not a sweep's own defaults.
        assert (cfg["workload"]["prefix_groups"], cfg["workload"]["prefix_tokens"]) == (2, 64), cfg["workload"]
        # What `infbench run` does after a run, done for each point: the engine's configuration
        # linked, the dcgm-named series it exports moved into gpu_samples.
        assert _q(db, "SELECT count(*) FROM configs WHERE run_id = ?", run_id) == [(1,)]
        assert _q(db, "SELECT count(*) > 0 FROM gpu_samples WHERE run_id = ?", run_id) == [(True,)]


def _q(db: Path, sql: str, *params: object) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()
