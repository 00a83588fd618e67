"""`infbench diagnose dilution` on the bundled engine: a benchmark run and a "production" run
that differ in known ways (4x longer prompts; half the prefix share; bursty arrivals; two at
once), each dilution re-measured by the command's re-runs and checked against the effect of
the injected difference measured directly (the two stored runs where one thing differs, or a
run with only that difference), within 10%; the parts and the interaction sum to the gap; the
biggest is named. The engine simulates a small model on an L4, whose steps (~27 ms decode,
a prefill of 1,536 tokens ~130 ms) dwarf the host's jitter. Loopback only, bounded runs."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.engine_process import EngineProcess, running_engine
from tests.support.cli import closed_loop, infbench
from tests.support.host_pauses import host_pauses_sql
from tests.support.paired_jitter import jitter_se
from tests.support.store_rows import store_rows

pytestmark = pytest.mark.e2e
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def slow_engine() -> Iterator[EngineProcess]:
    with running_engine("--gpu", "L4") as e:
        yield e


def run(engine: EngineProcess, db: Path, *options: str) -> str:
    r = infbench("run", "--url", engine.url, "--db", str(db), "--quiet", "--scrape-interval", "0.5",
                 *options, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return str(store_rows(db, "SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 1")[0][0])


def dilution(engine: EngineProcess, db: Path, bench: str, prod: str, metric: str) -> dict[str, Any]:
    r = infbench("diagnose", "dilution", bench, prod, "--db", str(db), "--url", engine.url,
                 "--seconds", "40", "--metric", metric, "--json", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # the budget is printed (stderr with --json) before the first re-run is
    assert r.stderr.index("budget: each re-run at most") < r.stderr.index("re-run 1/")
    return json.loads(r.stdout)


def table(d: dict[str, Any], metric: str) -> dict[str, float]:
    return {row["part"]: row["value"] for row in d["context"]["table"] if row["metric"] == metric}


def metric_of(d: dict[str, Any], metric: str, side: str) -> float:
    return float(d["context"]["metrics"][side][metric])


def check_sum(t: dict[str, float], parts: list[str]) -> None:
    total = math.fsum(t[p] for p in parts) + t["interaction"]
    assert total == pytest.approx(t["gap"], abs=1e-6 * max(1.0, abs(t["gap"])))
    details = t["swap_interaction"] + t["baseline_drift"] + t["not_reproduced"]
    assert details == pytest.approx(t["interaction"], abs=1e-6 * max(1.0, abs(t["gap"])))


def within_ttft(d: dict[str, Any], part: str, db: Path, bench: str, prod: str) -> None:
    """The re-measured mean-TTFT effect of `part` against the stored runs' gap (they differ in
    that only), within 10% plus what the host's own pauses added to the four runs' mean TTFTs
    by the engine's step log (`host_slack_ttft`; round R41, the suite beside a busy neighbour:
    78 ms re-measured against a 92 ms gap), plus two standard errors of the batching jitter
    between each re-run and its stored twin (`jitter_se`).

    Each re-run replays its twin's schedule (the baseline's twin is the benchmark, the part's
    the production run: checked here, request for request), so what is left between them is
    which requests of a burst a step took in, decided by sub-millisecond timing and
    multiplied by the queue: on the bursty test, five production runs of one schedule read
    mean TTFTs 322 (CI, quiet) to 355 ms (two spinning neighbours), a run-to-run spread about
    a third of the 10% band, so the band alone failed about one round in ten (CI on 6491245:
    245.6 ms re-measured against a 221.7 ms gap, no host-late step). The jitter's standard
    error, measured: 0.9 ms on an idle host, 3.5 and 11.2 beside two spinning neighbours
    (where the re-measured effect and the gap were 3.8 and 8.4 ms apart). A wrong re-run moves
    its bursts apart from its twin's too, so its error inflates the bound: re-runs with 15%
    longer prompts read 57 ms over the gap, caught against a bound of 43 ms (three errors
    would have let a 20% error by)."""
    t = table(d, "ttft_ms")
    baseline, swapped = rerun_ids(db, part)
    slack = host_slack_ttft(db, [bench, prod, baseline, swapped])
    se = math.hypot(jitter_se(db, bench, baseline), jitter_se(db, prod, swapped))
    bound = TOLERANCE * abs(t["gap"]) + slack + 2 * se
    assert abs(t[part] - t["gap"]) <= bound, (t[part], t["gap"], slack, se)


def rerun_ids(db: Path, part: str) -> list[str]:
    """The re-runs a one-at-a-time part is the difference of: the baseline and `part`'s."""
    tags = dict(store_rows(db, "SELECT json_extract_string(config, '$.dilution.config'), run_id "
                               "FROM runs WHERE json_extract(config, '$.dilution') IS NOT NULL"))
    return [tags["baseline"], tags[part]]


# A step the host delayed by h seconds delays by at most h the first token of every request
# sent before the step ended that had no first token before the delay began.
TTFT_SLACK_SQL = """
WITH pauses AS ($pauses), q AS (
  SELECT send_ns, first_content_ns FROM requests
  WHERE run_id = $run_id AND phase = 'measure' AND error_class IS NULL AND first_content_ns IS NOT NULL
)
SELECT coalesce(sum(p.h * 1e3), 0) / (SELECT count(*) FROM q)
FROM pauses p JOIN q ON q.send_ns < p.e_ns AND q.first_content_ns > p.e_ns - p.h * 1e9
"""


def host_slack_ttft(db: Path, runs: list[str]) -> float:
    """How far the host's own pauses moved these runs' mean TTFTs, summed (ms)."""
    return sum(float(store_rows(db, TTFT_SLACK_SQL.replace("$pauses", host_pauses_sql(r))
                                .replace("$run_id", f"'{r}'"))[0][0]) for r in runs)


def host_slack(db: Path, runs: list[str]) -> float:
    """How far the host's own pauses moved the throughput of these runs, summed (tokens/s):
    each run's throughput without its host excess minus as measured."""
    slack = 0.0
    for run_id in runs:
        excess = float(store_rows(db, f"SELECT coalesce(sum(h), 0) FROM ({host_pauses_sql(run_id)})")[0][0])
        tokens, span = store_rows(db, "SELECT sum(output_tokens), (max(end_ns) - min(send_ns)) / 1e9 "
                                      f"FROM requests WHERE run_id = '{run_id}' AND phase = 'measure' "
                                      "AND error_class IS NULL")[0]
        slack += float(tokens) / (float(span) - excess) - float(tokens) / float(span)
    return slack


def within_throughput(measured: float, direct: float, db: Path, runs: list[str]) -> None:
    """`within` for a throughput effect, two runs on each side: a host that paused the engine
    (a CI neighbour, the suite's other workers) moves a few-second run's throughput by what the
    engine's own log says it lost, and that much is the host's, not the re-run's error (round
    Q8: a 4 s re-run with two host-late steps read 6% below its direct twin)."""
    slack = host_slack(db, runs)
    assert abs(measured - direct) <= TOLERANCE * abs(direct) + slack, (measured, direct, slack)


def test_four_times_longer_prompts_only(slow_engine: EngineProcess, tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    # one Poisson schedule for both (a closed loop of equal requests phase-locks: see below)
    common = ("--arrival", "poisson", "--rate", "3", "--seed", "9", "--num-requests", "48",
              "--output-tokens", "12")
    bench = run(slow_engine, db, *common, "--input-tokens", "384")
    prod = run(slow_engine, db, *common, "--input-tokens", "1536")
    d = dilution(slow_engine, db, bench, prod, "ttft_ms")
    assert d["context"]["differing"] == ["input_lengths"]
    t = table(d, "ttft_ms")
    direct = t["gap"]  # the two runs differ in the prompts' lengths only
    assert direct > 50
    within_ttft(d, "input_lengths", db, bench, prod)
    check_sum(t, ["input_lengths"])
    assert d["findings"][0]["verdict"] == "dilution_input_lengths"
    # the re-runs are stored, tagged with their session and what they swapped
    tags = store_rows(db, "SELECT json_extract_string(config, '$.dilution.config') FROM runs "
                          "WHERE json_extract(config, '$.dilution') IS NOT NULL ORDER BY created_at")
    assert [x[0] for x in tags] == ["baseline", "input_lengths"]


def test_half_the_prefix_share_only(slow_engine: EngineProcess, tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    # Poisson arrivals of one seed, the same schedule in both runs and their replays: a closed
    # loop of three equal requests locks into waves (TTFTs 71/130/129 ms, each wave queued
    # behind itself), and a loaded host can knock a run out of that lockstep, so its mean TTFT
    # is not one quantity (CI: a direct gap of 108 ms against 137 ms on a quiet host). 2 a
    # second, not 4: at 4 the engine was ~85% busy on production's prefills, where the queue
    # multiplies any step the host runs late (round R21: three such steps moved one run's mean
    # TTFT by 15%, the re-measured effect 157 ms against the stored runs' 127). Beside a busy
    # neighbour, re-measured against direct: at 4 a second -0.7%, +7.7%, +1.6% (and R21's +23%);
    # at 2 -1.7%, -1.2%, -0.1%, the gap ~86 ms.
    common = ("--workload", "prefix", "--prefix-groups", "2", "--arrival", "poisson", "--rate", "2",
              "--seed", "5", "--num-requests", "64", "--output-tokens", "12")
    bench = run(slow_engine, db, *common, "--prefix-tokens", "1536", "--input-tokens", "512")
    prod = run(slow_engine, db, *common, "--prefix-tokens", "768", "--input-tokens", "1280")
    d = dilution(slow_engine, db, bench, prod, "ttft_ms")
    assert d["context"]["differing"] == ["prefix_share"]
    ev = {e["name"]: e["values"] for e in d["findings"][0]["evidence"]}
    assert ev["prefix_share_production"]["share"] == pytest.approx(
        ev["prefix_share_benchmark"]["share"] / 2, rel=0.1)
    t = table(d, "ttft_ms")
    assert t["gap"] > 50
    within_ttft(d, "prefix_share", db, bench, prod)
    check_sum(t, ["prefix_share"])
    assert d["findings"][0]["verdict"] == "dilution_prefix_share"


def test_bursty_arrivals_only(slow_engine: EngineProcess, tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    common = ("--rate", "10", "--seed", "3", "--num-requests", "160", "--input-tokens", "512",
              "--output-tokens", "12")
    bench = run(slow_engine, db, "--arrival", "poisson", *common)
    prod = run(slow_engine, db, "--arrival", "gamma", "--burstiness", "0.1", *common)
    d = dilution(slow_engine, db, bench, prod, "ttft_ms")
    assert d["context"]["differing"] == ["arrivals"]
    t = table(d, "ttft_ms")
    assert t["gap"] > 50
    within_ttft(d, "arrivals", db, bench, prod)
    check_sum(t, ["arrivals"])
    assert d["findings"][0]["verdict"] == "dilution_arrivals"


def test_two_differences_at_once(slow_engine: EngineProcess, tmp_path: Path) -> None:
    """Production runs a third of the benchmark's concurrency and a quarter of its replies: both
    cost throughput, concurrency the most; they interact (fewer slots lose less to shorter
    replies), and the interaction takes that."""
    db = tmp_path / "d.duckdb"
    bench = run(slow_engine, db, *closed_loop(24, 6, "1024", "64"))
    prod = run(slow_engine, db, *closed_loop(24, 2, "1024", "16"))
    # each difference alone, measured directly
    slots_only = run(slow_engine, db, *closed_loop(24, 2, "1024", "64"))
    replies_only = run(slow_engine, db, *closed_loop(24, 6, "1024", "16"))
    d = dilution(slow_engine, db, bench, prod, "throughput")
    assert d["context"]["differing"] == ["output_lengths", "arrivals"]
    t = table(d, "throughput")
    rows = dict(store_rows(db, "SELECT run_id, (SELECT sum(output_tokens) / ((max(end_ns) - min(send_ns)) / 1e9) "
                               "FROM requests r WHERE r.run_id = runs.run_id AND phase = 'measure' "
                               "AND error_class IS NULL) FROM runs"))
    base = rows[bench]
    assert base == pytest.approx(metric_of(d, "throughput", "bench"))
    direct = {"arrivals": rows[slots_only] - base, "output_lengths": rows[replies_only] - base}
    reruns = dict(store_rows(db, "SELECT json_extract_string(config, '$.dilution.config'), run_id "
                                 "FROM runs WHERE json_extract(config, '$.dilution') IS NOT NULL"))
    # one at a time: each part is its re-run less the re-run baseline
    for name in direct:
        assert t[name] == pytest.approx(rows[reruns[name]] - rows[reruns["baseline"]], rel=1e-6)
    for name, effect in direct.items():
        one = {"arrivals": slots_only, "output_lengths": replies_only}[name]
        within_throughput(t[name], effect, db, [bench, one, reruns["baseline"], reruns[name]])
    check_sum(t, ["output_lengths", "arrivals"])
    assert t["gap"] < 0 and direct["arrivals"] < direct["output_lengths"] < 0
    assert d["findings"][0]["verdict"] == "dilution_arrivals"
