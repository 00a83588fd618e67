"""`infbench probe links` through the real CLI: 4 gloo ranks on this host, rank 2's links slowed
3x by the lab fault. The probe names rank 2, stores every measurement with nccl-tests'
definitions, links to a run whose report plots busbw by size, and leaves no process behind.
(The pair matrix, another rank and factor, and a healthy probe: test_probe_links_pairwise.py.)"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import duckdb
import pytest

from infbench.store import create_run, finish_run, open_store
from tests.e2e.links_support import processes_with_env
from tests.e2e.page_check import CHROMIUM, check_page
from tests.support.cli import infbench

# Rank groups timed against each other: beside other xdist workers their timings are the
# neighbours' (a 3x slow link measured 1.4x, a probe's verdict "cannot tell"), so this
# file runs in the README's second, one-process part (`-m serial`).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

FACTORS = {"all_reduce": 1.5, "all_gather": 0.75, "reduce_scatter": 0.75, "alltoall": 0.75, "broadcast": 1.0}


def test_cli_probe_names_the_slow_rank_and_the_report_plots_it(tmp_path: Path) -> None:
    db = tmp_path / "links.duckdb"
    con = open_store(db)
    create_run(con, run_id="run-links", config={}, target_url="", model="", endpoint="", t0_monotonic_ns=0)
    finish_run(con, "run-links", status="completed", summary={})
    con.close()
    marker = f"INFBENCH_LINKS_TEST={uuid.uuid4().hex}"
    key, value = marker.split("=")
    r = infbench("probe", "links", "--ranks", "4", "--sizes", "64K,256K", "--repeats", "2", "--iters", "4",
                 "--warmup", "1", "--inject", "slow-link:rank=2,factor=3", "--run", "run-links",
                 "--db", str(db), timeout=240, **{key: value})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "slow-rank bisection: slow_rank: rank 2 is slow" in r.stdout, r.stdout[-3000:]
    for op in FACTORS:
        assert f"{op} on 4 ranks" in r.stdout
    time.sleep(0.5)
    assert processes_with_env(marker) == []  # every rank exited (or was killed) with the CLI

    con = duckdb.connect(str(db), read_only=True)
    (pid, run_id, verdict, cfg), = con.execute("SELECT probe_id, run_id, verdict, config FROM link_probes").fetchall()
    assert run_id == "run-links" and json.loads(cfg)["inject"] == "slow-link:rank=2,factor=3"
    v = json.loads(verdict)
    assert v["bisect"]["rank"] == 2 and v["bisect"]["steps"][0]["a"] == [0, 1]
    sweep = con.execute("SELECT op, bytes, ranks, repeat, time_us, algbw_gbps, busbw_gbps, wrong, in_place "
                        "FROM collectives WHERE probe_id = ? AND phase = 'sweep'", [pid]).fetchall()
    assert len(sweep) == 5 * 2 * 2  # ops x sizes x repeats
    for op, size, n, _rep, t, alg, bus, wrong, in_place in sweep:
        assert n == 4 and wrong == 0 and t > 0
        assert alg == pytest.approx(size / (t * 1e-6) / 1e9)
        assert bus == pytest.approx(alg * FACTORS[op])
        assert in_place == (op in ("all_reduce", "broadcast"))
    # the verdict's SQL recomputes its comparisons from the stored rows
    steps = con.execute(v["sql"]["bisect"]).fetchall()
    assert [s[0] for s in steps] == [0, 1]
    first = {(s[1], s[2]): s[3] for s in steps if s[0] == 0}
    assert first[("0,1", "2,3")] < 1 / 1.5  # {2,3} holds the slow rank
    con.close()

    html = tmp_path / "run.html"
    r = infbench("report", "run-links", "--db", str(db), "--html", str(html))
    assert r.returncode == 0, r.stderr
    page = html.read_text()
    assert f"Bus bandwidth by message size: probe {pid}" in page
    r = infbench("probe", "show-links", "last", "--db", str(db), "--html", str(tmp_path / "links.html"))
    assert r.returncode == 0 and "rank 2 is slow" in r.stdout, r.stderr
    if CHROMIUM:
        check = check_page(tmp_path / "links.html")
        assert check["errors"] == [] and check["resources"] == [] and check["charts"] >= 1


def test_bad_input_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    for args, says in ((["--ranks", "1"], "--ranks must be between 2 and 64"),
                       (["--sizes", "64Q"], "size '64Q' is not a size"),
                       (["--ops", "allsum"], "--ops: 'allsum'"),
                       (["--inject", "slow-link:rank=7,factor=2"], "rank 7 is not one of the 4 ranks"),
                       (["--inject", "hang:rank=1"], "fault kind 'hang' is unknown"),
                       (["--backend", "nccl"], "needs one GPU per rank")):
        r = infbench("probe", "links", *args, "--db", str(db))
        assert r.returncode in (1, 2) and says in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
    r = infbench("probe", "show-links", "nope", "--db", str(db))
    assert r.returncode == 2 and "no such probe" in r.stderr
