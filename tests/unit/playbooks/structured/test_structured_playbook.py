"""The structured playbook (playbooks/structured/) on stores written from rows: a compile
stall named with its milliseconds, the mask's mode named from the step log, and nothing on a
healthy run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from infbench.store import create_run
from playbooks.structured import diagnose_structured
from tests.support.stores import insert_rows, new_store

MS = 1_000_000


def store(tmp_path: Path, requests: list[tuple[str, float, float]], *,
          schemas: list[dict[str, Any]] | None = None, steps: list[dict[str, Any]] = (),
          workload: str = "structured") -> duckdb.DuckDBPyConnection:
    """`requests`: (label, send ms, ttft ms); `steps`: engine_steps rows with grammar fields."""
    con = new_store(tmp_path / "s.duckdb")
    wl: dict[str, Any] = {"workload": workload}
    if schemas is not None:
        wl["schemas"] = {"count": len(schemas), "schemas": schemas}
    create_run(con, run_id="r", config={"workload": wl}, target_url="http://127.0.0.1:1",
               model="m", endpoint="chat", t0_monotonic_ns=0)
    insert_rows(con, "requests", [
        {"run_id": "r", "request_idx": i, "label": label, "phase": "measure",
         "send_ns": int(send * MS), "first_content_ns": int((send + ttft) * MS)}
        for i, (label, send, ttft) in enumerate(requests)])
    insert_rows(con, "engine_steps", [{"run_id": "r", "step_id": i, **row} for i, row in enumerate(steps)])
    return con


def workload_run(rng: np.random.Generator, k: int, per_schema: int, warm_ms: float,
                 cold_ms: dict[str, float], gap_ms: float = 30.0) -> list[tuple[str, float, float]]:
    """Requests every gap_ms, schemas picked at random; a schema's first request pays its
    cold_ms (schemas not in cold_ms were cached already)."""
    labels = [f"schema-{i:03d}" for i in range(k)]
    picks = list(np.repeat(labels, per_schema))
    rng.shuffle(picks)
    seen: set[str] = set()
    out = []
    for n, label in enumerate(picks):
        ttft = warm_ms + rng.normal(0, warm_ms * 0.06)
        if label not in seen:
            ttft += cold_ms.get(label, 0.0)
            seen.add(label)
        out.append((str(label), n * gap_ms, max(1.0, ttft)))
    return out


def finding(d: Any, verdict: str) -> Any:
    return next(f for f in d.findings if f.verdict == verdict)


@pytest.mark.parametrize(("k", "warm_ms", "base_ms", "per_kib", "seed"), [
    (6, 48.0, 140.0, 0.0, 1), (9, 22.0, 12.0, 55.0, 2), (14, 75.0, 30.0, 120.0, 3)])
def test_a_compile_stall_is_named_with_its_milliseconds_and_size_growth(
        tmp_path: Path, k: int, warm_ms: float, base_ms: float, per_kib: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = {f"schema-{i:03d}": int(300 + 700 * i) for i in range(k)}
    cold = {label: base_ms + per_kib * b / 1024 for label, b in sizes.items()}
    listed = [{"label": label, "fields": 3, "bytes": b, "new": True} for label, b in sizes.items()]
    # a gap longer than any stall: no request joins another's compile
    gap = 2 * (max(cold.values()) + warm_ms)
    reqs = workload_run(rng, k, 12, warm_ms, cold, gap_ms=gap)
    con = store(tmp_path, reqs, schemas=listed)
    d = diagnose_structured(con, "r")
    f = finding(d, "grammar_compile_stall")
    ev = next(e.values for e in f.evidence if e.name == "first_vs_later")
    # the run's first request went out alone before any token: the opening burst, left out
    assert ev["schemas_in_opening_burst"] == 1 and ev["schemas"] == k - 1
    assert ev["requests_joined"] == 0
    want = float(np.median([ms for label, ms in cold.items() if label != reqs[0][0]]))
    assert ev["extra_ms_per_cold_schema_median"] == pytest.approx(want, abs=4 * warm_ms * 0.06 + 1)
    fit = next((e.values for e in f.evidence if e.name == "extra_vs_schema_size"), None)
    assert fit is not None
    assert fit["ms_per_kib"] == pytest.approx(per_kib, abs=12.0)
    assert ("per KiB" in f.summary) == (per_kib > 0)
    for e in f.evidence:
        if e.sql:
            con.execute(e.sql).fetchall()  # the SQL shown is the SQL that ran
    assert any("cannot be told" in n for n in d.notes)  # no step log: the mask is unknown
    assert not any(x.verdict.startswith("grammar_mask") for x in d.findings)


def test_a_healthy_run_with_slow_outliers_among_later_requests_has_no_finding(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    reqs = workload_run(rng, 8, 15, 40.0, {})
    # a few slow later requests (another cause) must not read as compiles
    reqs = [(lab, s, t + (300.0 if i % 37 == 36 else 0.0)) for i, (lab, s, t) in enumerate(reqs)]
    d = diagnose_structured(store(tmp_path, reqs), "r")
    assert d.findings == []
    assert d.context["schemas_seen"] == 8


def test_only_schemas_new_to_the_run_stall_when_the_others_were_cached(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    labels = [f"schema-{i:03d}" for i in range(10)]
    new = set(labels[::2])
    listed = [{"label": x, "fields": 4, "bytes": 400, "new": x in new} for x in labels]
    reqs = workload_run(rng, 10, 10, 30.0, {x: 90.0 for x in new}, gap_ms=400.0)
    d = diagnose_structured(store(tmp_path, reqs, schemas=listed), "r")
    f = finding(d, "grammar_compile_stall")
    split = next(e.values for e in f.evidence if e.name == "new_vs_stable")
    # one schema's first request opened the run (the opening burst): 9 of the 10 are judged
    assert split["new_schemas"] + split["stable_schemas"] == 9
    assert {split["new_schemas"], split["stable_schemas"]} <= {4, 5}
    ev = next(e.values for e in f.evidence if e.name == "first_vs_later")
    assert ev["schemas_stalled"] == split["new_schemas"]
    assert split["new_extra_ms_median"] == pytest.approx(90.0, abs=8)
    assert abs(split["stable_extra_ms_median"]) < 8


def test_requests_sent_during_the_first_ones_compile_are_counted_as_joined(tmp_path: Path) -> None:
    # three schemas; a's and b's 2nd and 3rd requests go out 10 ms after their first, inside
    # its 200 ms (three, not two: against 8 later requests a first request is above them all by
    # chance 1 in 9, so two of two would not be told from chance at 1%)
    reqs = [("w", 0, 20), ("a", 100, 230), ("a", 110, 221), ("a", 120, 211), ("b", 105, 235),
            ("b", 115, 225), ("c", 130, 228)]
    reqs += [(lab, 1000 + 50 * i, 30 + i % 3) for i, lab in enumerate("abwcabwc")]
    d = diagnose_structured(store(tmp_path, reqs), "r")
    ev = next(e.values for e in finding(d, "grammar_compile_stall").evidence
              if e.name == "first_vs_later")
    assert ev["requests_joined"] == 3 and ev["requests_later"] == 8


def steps_rows(n: int, *, blocking: bool, mask_ms: float, exposed_ms: float, step_ms: float,
               seqs: int = 4, compiles: list[tuple[int, float]] = (),
               idle_while_waiting: bool = False) -> list[dict[str, Any]]:
    rows = []
    done = dict(compiles)
    for i in range(n):
        c, cms = (1, done[i]) if i in done else (0, 0.0)
        waiting = 2 if c == 0 and i < max(done or [0]) else 0
        rows.append({"start_s": i * step_ms / 1e3, "end_s": (i + 1) * step_ms / 1e3,
                     "prefill_tokens": 0,
                     "decode_seqs": 0 if waiting and idle_while_waiting else seqs,
                     "structured_seqs": seqs, "grammar_mask_ms": mask_ms,
                     "grammar_mask_exposed_ms": exposed_ms, "grammar_mask_blocking": blocking,
                     "grammar_waiting": waiting,
                     "grammar_compiles": c, "grammar_compile_ms": cms,
                     "grammar_cache_hits": 1, "grammar_cache_misses": c})
    return rows


@pytest.mark.parametrize(("mask_ms", "step_ms", "severity"), [(0.9, 9.0, "warning"),
                                                               (0.12, 14.0, "info")])
def test_a_blocking_mask_is_named_with_its_share_of_the_step(
        tmp_path: Path, mask_ms: float, step_ms: float, severity: str) -> None:
    reqs = workload_run(np.random.default_rng(21), 4, 10, 25.0, {})
    steps = steps_rows(300, blocking=True, mask_ms=mask_ms, exposed_ms=mask_ms, step_ms=step_ms)
    d = diagnose_structured(store(tmp_path, reqs, steps=steps), "r")
    f = finding(d, "grammar_mask_blocks_step")
    assert f.severity == severity
    ev = f.evidence[0].values
    assert ev["mode"] == "blocking" and ev["mask_ms_per_step"] == pytest.approx(mask_ms)
    assert ev["exposed_share_of_step"] == round(mask_ms / step_ms, 4)  # shown to 4 places
    assert d.context["mask_mode"] == "blocking"
    assert not any("cannot be told" in n for n in d.notes)  # the step log says the mode


@pytest.mark.parametrize(("mask_ms", "exposed_ms", "verdict"), [
    (0.3, 0.0, "grammar_mask_overlapped"), (6.5, 1.5, "grammar_mask_outlasts_forward")])
def test_an_overlapped_mask_is_hidden_or_outlasts_the_forward(
        tmp_path: Path, mask_ms: float, exposed_ms: float, verdict: str) -> None:
    reqs = workload_run(np.random.default_rng(22), 4, 10, 25.0, {})
    steps = steps_rows(200, blocking=False, mask_ms=mask_ms, exposed_ms=exposed_ms, step_ms=6.0)
    d = diagnose_structured(store(tmp_path, reqs, steps=steps), "r")
    assert [f.verdict for f in d.findings] == [verdict]
    assert d.findings[0].evidence[0].values["mode"] == "overlap"


def test_more_compiles_than_schemas_is_a_cache_too_small(tmp_path: Path) -> None:
    reqs = workload_run(np.random.default_rng(23), 3, 10, 25.0, {})
    steps = steps_rows(100, blocking=False, mask_ms=0.1, exposed_ms=0.0, step_ms=5.0,
                       compiles=[(3, 40.0), (20, 41.0), (50, 39.0), (70, 42.0), (90, 40.0)])
    d = diagnose_structured(store(tmp_path, reqs, steps=steps), "r")
    f = finding(d, "grammar_cache_too_small")
    assert f.evidence[0].values["recompiles"] == 2
    assert "--grammar-cache-size 3" in f.next_actions[0]
    assert d.context["engine_ms_per_compile"] == pytest.approx(40.4)


def test_a_run_of_another_workload_is_refused_naming_it(tmp_path: Path) -> None:
    con = store(tmp_path, [("x", 0, 10)], workload="synthetic")
    with pytest.raises(ValueError, match="not a structured-output run.*'synthetic'"):
        diagnose_structured(con, "r")


def test_the_diagnosis_round_trips_through_json(tmp_path: Path) -> None:
    from playbooks.findings import Diagnosis
    reqs = workload_run(np.random.default_rng(9), 5, 8, 30.0, {f"schema-{i:03d}": 80.0 for i in range(5)},
                        gap_ms=500.0)
    d = diagnose_structured(store(tmp_path, reqs), "r")
    again = Diagnosis.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again.verdicts() == d.verdicts() == ["grammar_compile_stall"]


def burst_run(rng: np.random.Generator, k: int, conc: int, warm_ms: float, burst_ms: float,
              cold_ms: float) -> list[tuple[str, float, float]]:
    """A closed loop's opening: `conc` requests of distinct schemas at once, each slowed by
    burst_ms (the first prefills together) plus cold_ms; then one request every 40 ms."""
    labels = [f"schema-{i:03d}" for i in range(k)]
    out = [(labels[i], 0.1 * i, warm_ms + burst_ms + cold_ms) for i in range(conc)]
    seen = set(labels[:conc])
    for n in range(conc, 30 * k):
        label = labels[int(rng.integers(k))] if n >= k else labels[n]
        ttft = warm_ms + rng.normal(0, 1.0) + (cold_ms if label not in seen else 0.0)
        seen.add(label)
        out.append((label, 200.0 + 40.0 * n, ttft))
    return out


def test_an_opening_burst_of_first_requests_is_not_read_as_compiles(tmp_path: Path) -> None:
    # every schema used in the burst, warm (cached by an earlier run): slower only by the burst
    rng = np.random.default_rng(31)
    d = diagnose_structured(store(tmp_path, burst_run(rng, 4, 4, 9.0, 14.0, 0.0)), "r")
    assert d.findings == []
    assert d.context["schemas_first_in_opening_burst"] == 4
    assert any("opening burst" in n for n in d.notes)


@pytest.mark.parametrize("idle", [False, True])
def test_with_every_first_request_in_the_burst_the_step_log_still_names_the_stall(
        tmp_path: Path, idle: bool) -> None:
    rng = np.random.default_rng(32)
    reqs = burst_run(rng, 3, 3, 9.0, 14.0, 65.0)
    steps = steps_rows(120, blocking=False, mask_ms=0.05, exposed_ms=0.0, step_ms=4.0,
                       compiles=[(15, 64.0), (16, 66.0), (17, 65.5)], idle_while_waiting=idle)
    d = diagnose_structured(store(tmp_path, reqs, steps=steps), "r")
    f = finding(d, "grammar_compile_stall")
    assert f.confidence == 0.7 and "opening burst" in f.summary
    # whether the engine kept stepping the others is read from the log, not assumed
    assert ("nothing else ran" in f.summary) == idle
    assert ("held only the requests waiting" in f.summary) == (not idle)
    assert f.evidence[0].values["compiles"] == 3
    assert f.evidence[0].values["ms_per_compile"] == pytest.approx(65.17, abs=0.01)


def test_in_a_fleet_each_replica_compiles_for_itself(tmp_path: Path) -> None:
    # two replicas, 5 schemas: each replica's first request of a schema waits 70 ms; a schema's
    # first request on replica b is as cold as on a, not a "later" one
    rng = np.random.default_rng(41)
    rows = []
    for replica, offset in (("a", 0.0), ("b", 17.0)):
        for label, send, ttft in workload_run(rng, 5, 9, 20.0, {f"schema-{i:03d}": 70.0 for i in range(5)},
                                              gap_ms=300.0):
            rows.append((label, send + offset, ttft, replica))
    con = store(tmp_path, [])
    insert_rows(con, "requests", [
        {"run_id": "r", "request_idx": i, "label": label, "phase": "measure",
         "send_ns": int(send * MS), "first_content_ns": int((send + ttft) * MS), "replica": replica}
        for i, (label, send, ttft, replica) in enumerate(sorted(rows, key=lambda r: r[1]))])
    d = diagnose_structured(con, "r")
    ev = next(e.values for e in finding(d, "grammar_compile_stall").evidence
              if e.name == "first_vs_later")
    assert ev["schemas"] + ev["schemas_in_opening_burst"] == 10  # 5 schemas x 2 replicas
    assert ev["extra_ms_per_cold_schema_median"] == pytest.approx(70.0, abs=5)
    assert ev["warm_ttft_p95_ms"] < 30  # no replica's cold first request counted as warm


def slowed(reqs: list[tuple[str, float, float]], start_ms: float, end_ms: float,
           extra_ms: float) -> list[tuple[str, float, float]]:
    """Every request sent in [start_ms, end_ms) takes extra_ms longer: a stretch of the run
    slowed for another reason (a busy neighbour, the client's own start-up work)."""
    return [(lab, s, t + (extra_ms if start_ms <= s < end_ms else 0.0)) for lab, s, t in reqs]


@pytest.mark.parametrize(("k", "warm_ms", "slow_ms", "stretch", "seed"), [
    (8, 30.0, 90.0, 12, 4), (10, 45.0, 200.0, 18, 8), (6, 20.0, 40.0, 9, 13)])
def test_a_slow_stretch_where_the_first_requests_cluster_is_not_a_compile_stall(
        tmp_path: Path, k: int, warm_ms: float, slow_ms: float, stretch: int, seed: int) -> None:
    """Every schema was cached before the run; the run's opening stretch (where most schemas'
    first requests fall) is slower for every request in it."""
    gap = 30.0
    reqs = workload_run(np.random.default_rng(seed), k, 10, warm_ms, {}, gap_ms=gap)
    reqs = slowed(reqs, gap, gap * (stretch + 1), slow_ms)
    # the case that matters: against the whole run's warm p95 most first requests stand out
    warm = [t for i, (lab, _, t) in enumerate(reqs) if any(x == lab for x, _, _ in reqs[:i])]
    firsts = [t for i, (lab, s, t) in enumerate(reqs) if i and all(x != lab for x, _, _ in reqs[:i])]
    assert sum(t > np.quantile(warm, 0.95) for t in firsts) >= 3
    d = diagnose_structured(store(tmp_path, reqs), "r")
    assert d.findings == [], [f.summary for f in d.findings]


@pytest.mark.parametrize(("k", "warm_ms", "cold_ms", "slow_ms", "seed"), [
    (8, 30.0, 120.0, 90.0, 4), (12, 45.0, 160.0, 200.0, 8)])
def test_compiles_inside_a_slow_stretch_are_still_named(
        tmp_path: Path, k: int, warm_ms: float, cold_ms: float, slow_ms: float, seed: int) -> None:
    gap = 2 * (cold_ms + slow_ms + warm_ms)  # no request joins another's compile
    labels = [f"schema-{i:03d}" for i in range(k)]
    reqs = workload_run(np.random.default_rng(seed), k, 10, warm_ms, dict.fromkeys(labels, cold_ms),
                        gap_ms=gap)
    reqs = slowed(reqs, gap, gap * 15, slow_ms)
    d = diagnose_structured(store(tmp_path, reqs), "r")
    ev = next(e.values for e in finding(d, "grammar_compile_stall").evidence
              if e.name == "first_vs_later")
    # a first request just outside the stretch has slowed requests among its neighbours, and
    # one slowed more than its compile is missed: the stall is named from the rest
    assert ev["schemas_stalled"] >= ev["schemas"] // 2
    assert ev["extra_ms_per_cold_schema_median"] == pytest.approx(cold_ms, abs=6 * warm_ms * 0.06 + 1)


@pytest.mark.parametrize(("k", "warm_ms", "extra_ms", "seed"), [(8, 30.0, 40.0, 41), (12, 55.0, 90.0, 42)])
def test_slow_first_requests_in_a_run_the_engine_compiled_nothing_in_are_no_compile_stall(
        tmp_path: Path, k: int, warm_ms: float, extra_ms: float, seed: int) -> None:
    """Every schema was in the engine's cache (its step log: no compile), yet the first
    request of each came late (a busy host, say): the client alone would call it a compile
    stall, the engine's own log says otherwise and wins."""
    reqs = workload_run(np.random.default_rng(seed), k, 12, warm_ms,
                        {f"schema-{i:03d}": extra_ms for i in range(k)}, gap_ms=3 * (warm_ms + extra_ms))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    without_log = diagnose_structured(store(tmp_path / "a", reqs), "r")
    assert "grammar_compile_stall" in [f.verdict for f in without_log.findings]
    steps = steps_rows(300, blocking=False, mask_ms=0.05, exposed_ms=0.0, step_ms=4.0)
    d = diagnose_structured(store(tmp_path / "b", reqs, steps=steps), "r")
    assert "grammar_compile_stall" not in [f.verdict for f in d.findings]
    assert any("no grammar compile in this run" in n for n in d.notes), d.notes
