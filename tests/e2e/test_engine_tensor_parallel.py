"""The multi-rank engine as a user runs it: `python -m reference_engine --executor torch
--tensor-parallel-size 2`, over HTTP on loopback.

TP=2 answers greedy requests as TP=1 does; a hang on rank 1 turns /health to 503 with the
watchdog's line on stderr, its metric on /metrics and every rank's dump on disk; and neither
SIGKILL of a healthy server nor SIGTERM of a hung one leaves a rank process behind. Under
`infbench run` and `infbench diagnose RUN`: a hang on a rank is named as the cause of what the
clients saw (a slow link: test_engine_tensor_parallel_slow_link.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.engine_process import EngineProcess, launch, stop
from tests.support.cli import closed_loop, infbench, triage

# Nothing here is timed against anything: watchdogs of 2-4 s, dumps, exits. So these run in
# the README's first part, beside the other workers. The slow link, whose effect is a ratio of
# rank timings, runs in the serial part (test_engine_tensor_parallel_slow_link.py).
pytestmark = pytest.mark.e2e

BASE = (sys.executable, "-m", "reference_engine", "--port", "0", "--executor", "torch",
        "--num-gpu-blocks", "64", "--max-model-len", "256", "--max-num-batched-tokens", "32",
        "--max-num-seqs", "8")
PROMPTS = ["The quick brown fox", "Tensor parallel ranks", "a" * 40]
START_TIMEOUT_S = 150.0


def greedy_texts(engine: EngineProcess) -> list[str]:
    out = []
    for prompt in PROMPTS:
        status, _, body = engine.post_json("/v1/completions", {
            "model": "tiny-llama", "prompt": prompt, "max_tokens": 12, "temperature": 0,
            "ignore_eos": True})
        assert status == 200, body
        assert body["usage"]["completion_tokens"] == 12
        out.append(body["choices"][0]["text"])
    return out


def gone(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return False


def load_dump(path: str) -> dict[str, Any]:
    class PlainOnly(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            raise pickle.UnpicklingError(f"{module}.{name}")

    with open(path, "rb") as f:
        return PlainOnly(f).load()


def test_tp2_answers_as_tp1_dumps_on_request_and_dies_with_its_server(tmp_path: Path) -> None:
    one = launch([*BASE], timeout=START_TIMEOUT_S)
    try:
        expected = greedy_texts(one)
    finally:
        stop(one)
    two = launch([*BASE, "--tensor-parallel-size", "2", "--dump-dir", str(tmp_path)],
                 timeout=START_TIMEOUT_S)
    try:
        assert greedy_texts(two) == expected
        ranks = two.get_json("/debug/ranks")
        assert ranks["tensor_parallel_size"] == 2
        assert [r["rank"] for r in ranks["ranks"]] == [0, 1]
        assert ranks["ranks"][0]["pid"] == two.proc.pid
        assert ranks["ranks"][1]["dump"] == str(tmp_path / "rank_1")
        status, _, body = two.request("POST", "/debug/flight_recorder/dump")
        assert status == 200, body
        answer = json.loads(body)
        assert answer["complete"] and [d["written"] for d in answer["dumps"]] == [True, True]
        dumps = [load_dump(d["path"]) for d in answer["dumps"]]
        # Same collectives, in the same order, all completed, on both ranks.
        names = [[(e["collective_seq_id"], e["profiling_name"], e["state"]) for e in d["entries"]]
                 for d in dumps]
        assert names[0] == names[1] and {n[2] for n in names[0]} == {"completed"}
        assert two.request("GET", "/health")[0] == 200
        worker = ranks["ranks"][1]["pid"]
        assert Path(f"/proc/{worker}").exists()
    finally:
        two.proc.kill()  # no chance to clean up: the rank must notice on its own
        two.proc.wait()
    assert gone([worker], 5.0), "rank 1 outlived a SIGKILLed server"


def test_hang_on_rank1_is_reported_dumped_and_cleaned_up(tmp_path: Path) -> None:
    eng = launch([*BASE, "--tensor-parallel-size", "2", "--dump-dir", str(tmp_path),
                  "--collective-timeout-s", "2", "--fault", "hang:rank=1,at_step=3"],
                 timeout=START_TIMEOUT_S)
    try:
        ranks = [r["pid"] for r in eng.get_json("/debug/ranks")["ranks"]]
        # A client whose request will never finish (the engine hangs at step 3).
        threading.Thread(target=lambda: _quiet(eng.request, "POST", "/v1/completions", {
            "model": "tiny-llama", "prompt": "hang", "max_tokens": 30, "ignore_eos": True},
            timeout=60), daemon=True).start()
        deadline = time.monotonic() + 60
        while (status := eng.request("GET", "/health")[0]) == 200:
            assert time.monotonic() < deadline, "the watchdog never fired"
            time.sleep(0.2)
        status, _, body = eng.request("GET", "/health")
        assert status == 503
        assert "collective watchdog" in json.loads(body)["reason"]
        metrics = eng.metrics()
        assert metrics["reference_engine:collective_timeouts_total"] >= 1
        assert metrics["reference_engine:healthy"] == 0
        deadline = time.monotonic() + 20
        while not all((tmp_path / f"rank_{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline, "dumps not written"
            time.sleep(0.1)
        line = next(line for line in eng.stderr_lines if "collective watchdog" in line)
        assert line.startswith("ERROR: collective watchdog: rank 0 timed out in gloo:broadcast "
                               "(collective seq id ")
        seq = int(line.split("seq id ")[1].split(")")[0])
        behind = load_dump(str(tmp_path / "rank_1"))["pg_status"]["0"]
        assert behind["last_enqueued_collective"] == seq - 1
        assert all(Path(f"/proc/{p}").exists() for p in ranks)  # hung, not dead
        # Asked again while the ranks are stuck, every rank still answers.
        status, _, body = eng.request("POST", "/debug/flight_recorder/dump")
        assert status == 200 and json.loads(body)["complete"], body
        # The stack fallback: SIGUSR2 makes rank 1 write where its main thread is parked.
        stacks = Path(eng.get_json("/debug/ranks")["ranks"][1]["stacks"])
        os.kill(ranks[1], signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while "_hang_here" not in (stacks.read_text() if stacks.exists() else ""):
            assert time.monotonic() < deadline, "rank 1 wrote no stacks on SIGUSR2"
            time.sleep(0.1)
    finally:
        t0 = time.monotonic()
        eng.proc.send_signal(signal.SIGTERM)
        stop(eng)
    assert time.monotonic() - t0 < 15
    assert eng.proc.returncode is not None
    assert gone(ranks[1:], 5.0), "rank 1 outlived its server"


def _quiet(fn: Any, *args: Any, **kw: Any) -> None:
    # The server goes away under the request, as intended.
    with contextlib.suppress(OSError):
        fn(*args, **kw)


def _head(doc: dict) -> dict:
    return doc["context"]["headline"]


def test_hang_on_a_rank_names_the_rank_as_the_cause_of_the_stop(tmp_path: Path) -> None:
    """Two ranks (torch executor, gloo), rank 1 hangs before a step's broadcast. The live
    watch captures both ranks' Flight Recorder dumps and stacks during the stop; the triage
    joins the hang playbook's finding with the client's stop by their seconds, and the
    headline names the rank, with the requests the stop stranded."""
    pytest.importorskip("torch")
    db, dumps = tmp_path / "tp.duckdb", tmp_path / "dumps"
    dumps.mkdir()
    engine = [f"--engine-arg={a}" for a in (
        "--executor", "torch", "--tensor-parallel-size", "2", "--dump-dir", str(dumps),
        "--collective-timeout-s", "4", "--fault", "hang:rank=1,at_step=33")]
    r = infbench("run", "--db", str(db), "--quiet", *closed_loop(9, 3, "28", "20"), "--timeout", "12",
                 *engine, timeout=400)
    assert r.returncode == 1, r.stderr[-2000:]
    rc, doc = triage(db)
    head = _head(doc)
    assert rc == 1 and head["verdict"] == "rank_behind" and head["playbook"] == "hang", head
    assert head["symptom"] == {"verdict": "engine_stopped", "playbook": "stalls"}, head
    assert head["text"].startswith("Rank 1 is behind") and "requests (lost)" in head["text"], head
    behind = next(f for f in doc["findings"] if f["verdict"] == "rank_behind")
    assert behind["scope"]["windows_s"], behind["scope"]
    (inc,) = [i for i in doc["context"]["incidents"] if "rank_behind" in i["members"]]
    assert "engine_stopped" in inc["members"], doc["context"]["incidents"]
