"""The replicas playbook end to end over a real store written with the store's own writer:
a replica whose requests fail is named (a latency comparison over successes would not see
it), and a one-URL run gets the measurement plan, its commands built from the run's own
workload, arrivals and stop condition."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest

from infbench.store import create_run, finish_run
from infbench.store.writer import insert_batch, to_arrow
from playbooks.replicas import ReplicaOptions, diagnose_replicas
from playbooks.replicas.plan import measurement_plan
from tests.support.stores import new_store


def _write(con, run_id: str, config: dict, replicas: list[str | None], fail: dict[str, float],
           per: int = 120, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    create_run(con, run_id=run_id, config=config, target_url="http://lb:8000", model="m",
               endpoint="completions", t0_monotonic_ns=0)
    cols: dict[str, list] = {k: [] for k in ("request_idx", "phase", "replica", "replica_concurrency",
                                             "intended_send_ns", "send_ns", "first_content_ns",
                                             "last_choices_ns", "last_content_ns", "end_ns",
                                             "output_tokens", "error_class")}
    idx = 0
    for name in replicas:
        send = np.sort(rng.uniform(0, 10, per))
        conc = rng.integers(1, 5, per)
        ttft = 0.02 * (1 + 0.1 * conc) * np.exp(rng.normal(0, 0.1, per))
        tpot = 0.005 * (1 + 0.1 * conc) * np.exp(rng.normal(0, 0.1, per))
        failed = rng.uniform(0, 1, per) < fail.get(str(name), 0.0)
        for i in range(per):
            cols["request_idx"].append(idx)
            idx += 1
            cols["phase"].append("measure")
            cols["replica"].append(name)
            cols["replica_concurrency"].append(int(conc[i]))
            s = int(send[i] * 1e9)
            cols["intended_send_ns"].append(s)
            cols["send_ns"].append(s)
            if failed[i]:
                for k in ("first_content_ns", "last_choices_ns", "last_content_ns"):
                    cols[k].append(None)
                cols["end_ns"].append(s + 10**6)
                cols["output_tokens"].append(0)
                cols["error_class"].append("http_500")
                continue
            first = s + int(ttft[i] * 1e9)
            last = first + int(tpot[i] * 63 * 1e9)
            cols["first_content_ns"].append(first)
            cols["last_choices_ns"].append(last)
            cols["last_content_ns"].append(last)
            cols["end_ns"].append(last)
            cols["output_tokens"].append(64)
            cols["error_class"].append(None)
    insert_batch(con, run_id, "requests", to_arrow("requests", cols))
    finish_run(con, run_id, status="completed")


@pytest.mark.parametrize(("share", "named"), [(1.0, True), (0.5, True), (0.12, True), (0.03, False)])
def test_a_replica_that_fails_is_named(tmp_path: Path, share: float, named: bool) -> None:
    con = new_store(tmp_path / "s.duckdb")
    fleet = {"fleet": {"replicas": [{"name": n} for n in ("a", "b", "c")]}}
    _write(con, "run", fleet, ["a", "b", "c"], {"b": share}, seed=int(share * 100))
    diag = diagnose_replicas(con, "run")
    failing = [f for f in diag.findings if f.verdict == "replica_failing"]
    assert bool(failing) is named
    if named:
        assert failing[0].title.startswith("Replica b fails")
        assert failing[0].evidence[0].sql and "http_500" in failing[0].summary
    assert not any(f.verdict in ("replica_slower", "replica_busier") for f in diag.findings)
    con.close()


def test_one_url_run_gets_the_plan(tmp_path: Path) -> None:
    con = new_store(tmp_path / "s.duckdb")
    config = {"workload": {"workload": "prefix", "prefix_groups": 4, "prefix_tokens": 512,
                           "suffix_tokens": "uniform:64:256", "output_tokens": "128"},
              "arrivals": {"kind": "closed", "concurrency": 10, "rate": 4.0},
              "stop": {"duration_s": 60.0, "num_requests": None}, "seed": 7,
              "target": {"endpoint": "chat", "model": "llama"}}
    _write(con, "run", config, [None], {})
    diag = diagnose_replicas(con, "run", ReplicaOptions(db="prod.duckdb"))
    (f,) = diag.findings
    assert f.verdict == "replicas_unknown"
    assert f.evidence[0].values == {"requests_with_replica": 0, "requests": 120}
    steps = f.next_actions
    assert steps[0].startswith("Replace the REPLICA-N URLs")
    fleet = shlex.split(steps[1])
    assert fleet[:8] == ["infbench", "run", "--url", "r1=http://REPLICA-1:8000", "--url",
                         "r2=http://REPLICA-2:8000", "--url", "r3=http://REPLICA-3:8000"]
    for flag, value in (("--workload", "prefix"), ("--prefix-groups", "4"), ("--prefix-tokens", "512"),
                        ("--input-tokens", "uniform:64:256"), ("--arrival", "closed"),
                        ("--concurrency", "10"), ("--duration", "60"), ("--seed", "7"),
                        ("--endpoint", "chat"), ("--model", "llama"), ("--db", "prod.duckdb")):
        assert fleet[fleet.index(flag) + 1] == value, flag
    assert "--rate" not in fleet  # a closed loop has no rate
    # one at a time: a third of the concurrency each (rounded up), the same seed and duration
    pinned = steps[3]
    assert pinned.count("--concurrency 4 ") == 3 and pinned.count("--seed 7") == 3
    assert "infbench gate --baseline RUN_OF_REPLICA_1" in steps[4]
    con.close()


def test_plan_with_the_real_addresses() -> None:
    config = {"workload": {"workload": "synthetic", "input_tokens": "512", "output_tokens": "64"},
              "arrivals": {"kind": "gamma", "rate": 9.0, "burstiness": 0.5, "concurrency": 0},
              "stop": {"duration_s": None, "num_requests": 900}, "seed": 1}
    steps = measurement_plan(config, "x.duckdb", ["http://10.1.0.1:8000", "http://10.1.0.2:8000"])
    assert not steps[0].startswith("Replace")
    fleet = shlex.split(steps[0])
    assert fleet[fleet.index("--rate") + 1] == "9" and fleet[fleet.index("--burstiness") + 1] == "0.5"
    assert fleet[fleet.index("--num-requests") + 1] == "900"
    assert steps[2].count("--rate 4.5 ") == 2 and steps[2].count("--num-requests 450 ") == 2


@pytest.mark.parametrize("dropped", [3, 17])
def test_a_step_log_with_steps_missing_is_said_in_the_notes(tmp_path: Path, dropped: int) -> None:
    con = new_store(tmp_path / "s.duckdb")
    fleet = {"fleet": {"replicas": [{"name": n} for n in ("a", "b")]}}
    _write(con, "run", fleet, ["a", "b"], {}, seed=dropped)
    cols: dict[str, list] = {k: [] for k in ("replica", "step_id", "start_s", "end_s",
                                             "prefill_tokens", "num_waiting")}
    for name in ("a", "b"):
        for i in range(400):
            if name == "b" and 100 <= i < 100 + dropped:
                continue  # lost between two polls of b's step log
            for k, v in zip(cols, (name, i + 1, i * 0.025, (i + 1) * 0.025, 16 * (i % 3 == 0), 0),
                            strict=True):
                cols[k].append(v)
    insert_batch(con, "run", "engine_steps", to_arrow("engine_steps", cols))
    notes = diagnose_replicas(con, "run").notes
    assert [n for n in notes if "step log misses" in n] == [
        f"b: its stored step log misses {dropped} step(s) between its first and last (the engine's "
        "step buffer overflowed between polls), so its engine's time before first tokens is not "
        "compared"]
    con.close()
