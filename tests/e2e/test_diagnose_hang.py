"""`infbench diagnose hang --pids ... --dumps DIR` on plain torch.distributed (gloo) processes
that are not the bundled engine (tests/support/gloo_ranks.py, PyTorch's own Flight Recorder
dumps): rank 1 stops entering collectives; the CLI takes each process's rank from its RANK
variable (the pids are given out of order), reads the stacks with py-spy, and names rank 1,
the stuck sequence id and the frame where rank 0 waits. The engine's own faults (hang,
mismatch, healthy) are tested through --url in test_diagnose_hang_engine.py; both rank
processes are killed at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
from probes.hang.stacks import pyspy_path  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150),
              pytest.mark.skipif(pyspy_path() is None, reason="py-spy is not installed")]

ROOT = Path(__file__).resolve().parents[2]
RANKS = ROOT / "tests" / "support" / "gloo_ranks.py"
SCENARIOS = ("hang",)


def _free_port() -> int:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[list[int], Path]]]:
    """Two ranks per scenario, left hung for the capture."""
    procs: list[subprocess.Popen] = []
    out: dict[str, tuple[list[int], Path]] = {}
    try:
        for s in SCENARIOS:
            d = tmp_path_factory.mktemp(s)
            port = _free_port()
            pids = []
            for r in (0, 1):
                p = subprocess.Popen(
                    [sys.executable, str(RANKS), "--rank", str(r), "--port", str(port),
                     "--scenario", s, "--dump-dir", str(d), "--dump-after", "1.0"],
                    env={**os.environ, "RANK": str(r)}, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
                procs.append(p)
                pids.append(p.pid)
            out[s] = (pids, d)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(
                (d / f"ready_{r}").exists() for _, d in out.values() for r in (0, 1)):
            assert all(p.poll() is None for p in procs), "a rank exited early"
            time.sleep(0.2)
        assert all((d / f"ready_{r}").exists() for _, d in out.values() for r in (0, 1))
        yield out
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)


def _diagnose(pids: list[int], dumps: Path, db: Path) -> dict:
    # In-process (CliRunner): the CLI's own code path without a fresh interpreter per call.
    from typer.testing import CliRunner

    from infbench.cli import app
    r = CliRunner().invoke(app, ["diagnose", "hang", "--pids", ",".join(map(str, pids)),
                                 "--dumps", str(dumps), "--db", str(db), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_hang_names_rank_1_the_stuck_seq_and_where_rank_0_waits(ranks, tmp_path: Path) -> None:
    pids, d = ranks["hang"]
    diag = _diagnose(list(reversed(pids)), d, tmp_path / "s.duckdb")  # ranks from RANK, not order
    (f,) = diag["findings"]
    assert f["verdict"] == "rank_behind"
    assert f["title"].startswith("Rank 1 is behind: collective #19")
    ev = {e["name"]: e["values"] for e in f["evidence"]}
    assert ev["progress_per_rank"]["stuck_seq"] == 19
    assert ev["where_each_rank_waits"]["rank0_waits_in"].startswith(
        "all_reduce (torch/distributed/distributed_c10d.py:")
    assert ev["where_each_rank_waits"]["rank0_called_from"].startswith("layer_collective (")
    assert "gloo_ranks.py:" in ev["where_each_rank_waits"]["rank0_called_from"]
    assert ev["where_each_rank_waits"]["rank1_called_from"].startswith("wait_for_work_that_never_comes (")
    assert ev["where_each_rank_waits"]["rank0_thread"] == "MainThread (flight_recorder_thread)"
    ranks_ctx = {r["rank"]: r for r in diag["context"]["ranks"]}
    assert ranks_ctx[0]["pid"] == pids[0] and ranks_ctx[1]["pid"] == pids[1]
