"""`infbench gate` against the real reference engine: an A/A pair passes, an injected
regression (halved max_num_seqs, or a 10% slower device) fails, a run too short to tell is
inconclusive, and runs of different workloads are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import infbench

pytestmark = pytest.mark.e2e

# Llama-3.1-8B on the sim executor: ~6 ms decode steps, so the engine, not this 2-core
# machine, sets the pace; 8 concurrent requests keep every run to a few seconds.
LOAD = ("--arrival", "closed", "--concurrency", "8", "--input-tokens", "64", "--output-tokens", "32",
        "--quiet", "--json")
ENGINE = ("--engine-arg=--max-model-len", "--engine-arg=4096")

# Client-side latencies drift a few percent between runs on a shared machine (measured up
# to ~7% A/A here), so their tolerances are wide and run_noise says so; the server's own
# step time is precise enough for a 5% tolerance.
RULES = """
[gate]
run_noise = "3%"
[[rule]]
metric = "step_time"
statistic = "p50"
max_regression = "5%"
run_noise = "0.5%"
[[rule]]
metric = "e2el"
statistic = "p50"
max_regression = "30%"
[[rule]]
metric = "output_tokens"
statistic = "throughput"
max_regression = "30%"
"""


def _run(db: Path, n: int, *engine: str) -> str:
    r = infbench("run", "--db", str(db), "--num-requests", str(n), *LOAD, *ENGINE, *engine, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["run_id"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    d = tmp_path_factory.mktemp("gate")
    db, rules = d / "g.duckdb", d / "gates.toml"
    rules.write_text(RULES)
    runs = {
        "a1": _run(db, 160),
        "a2": _run(db, 160),
        "a3": _run(db, 160),
        "half_seqs": _run(db, 160, "--engine-arg=--max-num-seqs", "--engine-arg=4"),
        "slow": _run(db, 160, "--engine-arg=--fault", "--engine-arg=slow-device:factor=1.1"),
        "short": _run(db, 40),
    }
    return db, rules, runs


def _gate(store: tuple[Path, Path, dict[str, str]], base: str, cand: str, *extra: str):
    db, rules, runs = store
    r = infbench("gate", "--db", str(db), "--rules", str(rules), "--baseline", runs[base],
                 "--candidate", runs[cand], "--json", *extra)
    doc = json.loads(r.stdout) if r.stdout.strip() else None
    return r, doc


def test_a_a_passes(store) -> None:
    r, doc = _gate(store, "a1", "a2")
    assert r.returncode == 0, r.stdout
    assert doc["verdict"] == "pass"
    assert all(x["verdict"] == "pass" for x in doc["rules"])


def test_halved_max_num_seqs_fails(store) -> None:
    r, doc = _gate(store, "a1", "half_seqs")
    assert r.returncode == 1
    assert doc["verdict"] == "fail"
    by = {x["metric"]: x for x in doc["rules"]}
    assert by["e2el"]["verdict"] == "fail" and by["e2el"]["ci"][0] > 0.30
    assert by["output_tokens"]["verdict"] == "fail"


def test_slow_device_fails_on_step_time(store) -> None:
    r, doc = _gate(store, "a1", "slow")
    assert r.returncode == 1
    step = next(x for x in doc["rules"] if x["metric"] == "step_time")
    assert step["verdict"] == "fail"
    assert 0.05 < step["ci"][0] <= step["change"] <= step["ci"][1] < 0.15


def test_short_run_is_inconclusive_not_pass(store, tmp_path: Path) -> None:
    db, _, runs = store
    rules = tmp_path / "p99.toml"
    rules.write_text('[[rule]]\nmetric = "e2el"\nstatistic = "p99"\nmax_regression = "20%"\n'
                     '[[rule]]\nmetric = "output_tokens"\nstatistic = "throughput"\nmax_regression = "20%"\n')
    r = infbench("gate", "--db", str(db), "--rules", str(rules), "--baseline", runs["a1"],
                 "--candidate", runs["short"], "--json")
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "inconclusive"
    assert r.returncode == 1  # inconclusive counts as fail unless told otherwise
    r2 = infbench("gate", "--db", str(db), "--rules", str(rules), "--baseline", runs["a1"],
                  "--candidate", runs["short"], "--inconclusive", "pass")
    assert r2.returncode == 0


def test_outputs_for_ci(store, tmp_path: Path) -> None:
    md, xml = tmp_path / "gate.md", tmp_path / "gate.xml"
    r, _ = _gate(store, "a1", "half_seqs", "--markdown", str(md), "--junit", str(xml))
    assert r.returncode == 1
    assert "infbench gate: ❌ fail" in md.read_text()
    text = xml.read_text()
    assert '<testsuite name="infbench gate" tests="3"' in text and 'type="regression"' in text


def test_different_workload_is_refused(store, tmp_path: Path) -> None:
    db, rules, runs = store
    other = _run(db, 40, "--input-tokens", "128")
    r = infbench("gate", "--db", str(db), "--baseline", runs["a1"], "--candidate", other)
    assert r.returncode == 2
    assert "workload.input_tokens: '64' -> '128'" in r.stderr
    r2 = infbench("gate", "--db", str(db), "--rules", str(rules), "--baseline", runs["a1"],
                  "--candidate", other, "--allow-different-workloads", "--json")
    assert r2.returncode in (0, 1) and "workloads differ" in r2.stdout


def test_gate_plan_sizes_a_canary(store) -> None:
    db, rules, runs = store
    r = infbench("gate", "plan", "--db", str(db), "--rules", str(rules), "--baseline", runs["a1"],
                 "--change", "0.5", "--json")
    assert r.returncode == 0, r.stderr
    rows = {x["rule"]: x for x in json.loads(r.stdout)["rules"]}
    e2e = rows["e2el p50"]
    assert e2e["to_detect"] is not None and e2e["to_detect"] >= 30


def test_compare_side_by_side(store) -> None:
    db, _, runs = store
    r = infbench("compare", "--db", str(db), runs["a1"], runs["half_seqs"], "--json")
    assert r.returncode == 0
    m = json.loads(r.stdout)["metrics"]
    assert m["p50_e2el_ms"]["b"] > m["p50_e2el_ms"]["a"]


def test_gate_noise_measures_a_a_runs_into_rules_that_pass_them(store, tmp_path: Path) -> None:
    db, rules, runs = store
    out = tmp_path / "calibrated.toml"
    r = infbench("gate", "noise", runs["a1"], runs["a2"], runs["a3"], "--db", str(db), "--rules", str(rules),
                 "--write", str(out), "--json")
    assert r.returncode == 0, r.stderr
    rows = {x["rule"]: x for x in json.loads(r.stdout)["rules"]}
    assert set(rows) == {"step_time p50", "e2el p50", "output_tokens throughput"}
    for row in rows.values():
        assert len(row["values"]) == 3 and 0.0 <= row["run_noise"] <= row["upper"] < 0.5, row
    # The measured rules let the same build pass against itself.
    g = infbench("gate", "--db", str(db), "--rules", str(out), "--baseline", runs["a1"],
                 "--candidate", runs["a3"], "--json")
    assert g.returncode == 0, g.stdout
    # Too few runs is a usage error naming the field.
    few = infbench("gate", "noise", runs["a1"], runs["a2"], "--db", str(db))
    assert few.returncode == 2 and "runs:" in few.stderr
