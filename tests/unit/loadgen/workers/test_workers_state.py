"""The coordinator's account of a worker: what a dead one lost, said in its reason, and the
run's outcome from all of them."""

from __future__ import annotations

from typing import Any

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.run.types import RunSettings
from infbench.loadgen.workers.coordinator import Backend, Coordinator, WorkerState
from infbench.loadgen.workloads import Synthetic
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.prompts import TokenModel


def test_a_dead_worker_loses_what_it_sent_unstored_and_its_unsent_share() -> None:
    st = WorkerState(1, "process", 4, 0.5, planned=30, info={"pid": 77, "hostname": "h"})
    st.progress = {"sent": 9}
    st.stored = {"requests": 6}
    st.status, st.reason = "died", "worker process 77 ended (killed by SIGKILL)"
    assert st.lost() == (3, 21)
    text = st.describe()
    assert text.startswith("worker 1 (process 77 on h) died: worker process 77 ended (killed by SIGKILL)")
    assert "24 requests lost (3 sent and not stored, 21 scheduled and never sent)" in text


def test_without_a_plan_the_loss_is_a_lower_bound() -> None:
    st = WorkerState(0, "ray", 2, 1.0, planned=None, info={"pid": 5, "hostname": "n"})
    st.progress, st.stored, st.status, st.reason = {"sent": 12}, {"requests": 12}, "died", "lost"
    assert st.lost() == (0, None) and "at least 0 requests lost" in st.describe()
    st.status = "completed"
    assert st.lost() == (0, 0)


def _coordinator(workers: int) -> Coordinator:
    settings = RunSettings(url="http://127.0.0.1:1", endpoint="completions", model="m",
                           arrivals=Arrivals("closed", concurrency=4), num_requests=20)
    wl = Synthetic(LengthDist.parse("8", "in"), LengthDist.parse("4", "out"), TokenModel())
    return Coordinator(settings, wl, writer=None, t0_ns=0, backend=Backend(workers, lambda *a: None))  # type: ignore[arg-type]


def _done(requests: int, last_send_ns: int, status: str = "completed") -> dict[str, Any]:
    return {"status": status, "reason": None, "requests": requests, "last_send_ns": last_send_ns,
            "scrape_errors": {"metrics": 1}, "scrapes": {"metrics": 5}, "sizing": {"tokenize_calls": 2}}


def test_the_outcome_sums_workers_and_names_the_dead_one() -> None:
    c = _coordinator(2)
    c._handle(("hello", 1, {"pid": 9, "hostname": "h"}))
    c._handle(("progress", 0, {"sent": 10, "done": 8, "errors": 0, "in_flight": 2}))
    c._handle(("progress", 1, {"sent": 4, "done": 3, "errors": 1, "in_flight": 0}))
    assert (c.stats.sent, c.stats.done, c.stats.errors) == (14, 11, 1) and len(c.stats.recent_done_ns) == 12
    c._handle(("done", 0, _done(10, 5_000)))
    c._handle(("died", 0, "worker process 3 ended (exit code 0)"))  # its exit after `done`: ignored
    c._handle(("died", 1, "worker process 9 ended (killed by SIGKILL)"))
    c.workers[1].stored = {"requests": 3}
    c.check_invariants()
    out = c._outcome()
    assert out.status == "interrupted" and out.requests == 14 and out.last_send_ns == 5_000
    assert out.reason is not None and out.reason.startswith("worker 1 (process 9 on h) died")
    assert "7 requests lost (1 sent and not stored, 6 scheduled and never sent)" in out.reason
    assert out.scrapes == {"metrics": 5} and out.sizing == {"tokenize_calls": 2}
    assert c.workers[0].status == "completed"


def test_every_worker_done_is_a_completed_run() -> None:
    c = _coordinator(2)
    c._handle(("done", 0, _done(10, 7)))
    c._handle(("done", 1, _done(10, 9)))
    out = c._outcome()
    assert out.status == "completed" and out.reason is None and out.requests == 20 and out.last_send_ns == 9
