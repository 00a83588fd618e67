"""`infbench diagnose specdec` against the bundled engine speculating with n-gram drafts.

1. Acceptance from the run's scrapes equals the engines' own counters within 1%, in a run
   whose engine is restarted between two bursts (a counter reset inside the window) and
   whose requests mostly stop at EOS (the sim's natural answers are short).
2. Against a run at the same load without speculation, the batch size from which speculation
   costs throughput is found within one bucket of the engine's truth: its step log's tokens
   (decode sequences plus accepted drafts) over its step durations, per batch-size bucket.

Loopback only, each engine killed at the end; bounded in requests (<= 96 per run) and time.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from infbench.store import open_store
from playbooks.specdec import diagnose_specdec
from playbooks.specdec.speedup import bucket_of
from tests.e2e.engine_process import FAST_FLAGS, launch, running_engine, stop
from tests.support.cli import ROOT, cli_env, infbench

pytestmark = pytest.mark.e2e

SPEC_COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total")


def counters(eng) -> dict[str, float]:
    m = eng.metrics()
    return {name: m[name] for name in SPEC_COUNTERS}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_acceptance_across_a_restart_with_eos_heavy_requests(tmp_path: Path) -> None:
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
                       "prompt_lookup_max": 3})
    port = free_port()
    argv = [sys.executable, "-m", "reference_engine", *FAST_FLAGS, "--port", str(port),
            "--speculative-config", spec, "--sim-copy-probability", "0.7",
            "--sim-output-median", "20", "--sim-output-sigma", "0.4", "--seed", "13"]
    trace = tmp_path / "bursts.csv"
    rows = [(0.05 * i, 260, 150) for i in range(16)] + [(6.0 + 0.05 * i, 260, 150) for i in range(16)]
    trace.write_text("timestamp,input_tokens,output_tokens\n"
                     + "".join(f"{t:.2f},{i},{o}\n" for t, i, o in rows))
    db = tmp_path / "s.duckdb"
    first = launch(argv)
    second = None
    run = subprocess.Popen(
        [sys.executable, "-m", "infbench", "run", "--url", first.url, "--db", str(db), "--quiet",
         "--workload", "trace", "--trace", str(trace), "--no-ignore-eos",
         "--scrape-interval", "0.2"],
        cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The first burst's 16 prompts (~4200 tokens; preflight's probes are a few dozen)
        # have been served and nothing runs: the engine is idle until the second burst.
        deadline = time.monotonic() + 60
        while first.metrics()["vllm:prompt_tokens_total"] < 4000:
            assert time.monotonic() < deadline and run.poll() is None, run.communicate()[1][-2000:]
            time.sleep(0.1)
        done = first.wait_idle(timeout=4.0)
        assert done["vllm:num_requests_running"] == 0
        before = counters(first)
        # Idle through a few scrapes before the restart: the interval holding it is left out,
        # and it should hold nothing the engines counted (a restart under load loses what
        # ran between the last scrape and the kill, which no counter can tell).
        time.sleep(0.7)
        stop(first)  # the engine restarts between the bursts: its counters start again at 0
        second = launch(argv)
        out, err = run.communicate(timeout=120)
        after = counters(second)
    finally:
        if run.poll() is None:
            run.kill()
        stop(first)
        if second is not None:
            stop(second)
    assert run.returncode == 0, err[-2000:]
    assert before[SPEC_COUNTERS[2]] > 0 and after[SPEC_COUNTERS[2]] > 0
    con = open_store(db)
    try:
        # The preflight's probe requests were counted by the first engine before the run's
        # window opened (its first scrape): the truth is what the engines counted after it.
        at_open = dict(con.execute(
            "SELECT name, arg_min(value, t_ns) FROM metric_samples WHERE source = 'metrics' "
            "AND name LIKE 'vllm:spec_decode_num_%' AND name NOT LIKE '%per_pos%' GROUP BY name"
        ).fetchall())
        truth = {k: before[k] - at_open[k] + after[k] for k in SPEC_COUNTERS}
        diag = diagnose_specdec(con, "last")
        stopped = con.execute("SELECT count(*) FILTER (WHERE finish_reason = 'stop'), count(*) "
                              "FROM requests").fetchone()
    finally:
        con.close()
    assert stopped[0] >= 0.8 * stopped[1]  # EOS-heavy: most requests stopped at EOS
    assert "spec_counter_reset" in diag.verdicts()
    f = next(f for f in diag.findings if f.verdict in ("spec_acceptance", "spec_low_acceptance"))
    v = next(e.values for e in f.evidence if e.name == "spec_decode_counters")
    rate = truth[SPEC_COUNTERS[2]] / truth[SPEC_COUNTERS[1]]
    length = 1 + truth[SPEC_COUNTERS[2]] / truth[SPEC_COUNTERS[0]]
    assert v["acceptance_rate"] == pytest.approx(rate, rel=0.01)
    assert v["mean_accepted_length"] == pytest.approx(length, rel=0.01)
    client = next(e.values for e in f.evidence if e.name == "client_tokens_per_step")
    assert client["stopped_at_eos_left_out"] == stopped[0]


def step_log_throughput(steps: list[dict]) -> dict[int, float]:
    """Tokens per second of the engine's decode-only steps, per batch-size bucket."""
    acc: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for s in steps:
        if s["prefill_tokens"] == 0 and s["decode_seqs"] > 0:
            a = acc[bucket_of(s["decode_seqs"])]
            a[0] += s["decode_seqs"] + s.get("spec_accepted_tokens", 0)
            a[1] += s["end"] - s["start"]
    return {b: tokens / seconds for b, (tokens, seconds) in acc.items() if seconds > 0}


def test_the_batch_size_where_speculation_stops_paying(tmp_path: Path) -> None:
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 10, "prompt_lookup_min": 2,
                       "prompt_lookup_max": 3})
    # fp8 weights on an A100 (no fp8 compute: W8A16) halve the weight read, so the step turns
    # compute-bound at a batch the load reaches (the roofline puts K=10's crossover near 32).
    common = ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "A100-80GB-SXM", "--dtype", "fp8",
              "--sim-copy-probability", "0.8", "--seed", "5")
    # 96 requests at once whose lengths spread: the batch drains from 96 to 1 and stays long
    # enough in every bucket for a few scrapes. The 64-127 bucket is the tightest: the baseline
    # steps fast there and its engine, CPU-bound on a loaded host, answers /metrics late (gaps
    # up to 0.9 s). With lognormal:200:0.9 the baseline's decode-only time in it was 1.9-2.4 s,
    # 3-4 scrapes, and round R17 saw 2 usable intervals (3 needed): no crossover. At 400:0.6 it
    # is 2.9 s, 8-9 scrapes beside two busy neighbours, in the same test time (~39 s).
    load = ("--arrival", "closed", "--concurrency", "96", "--num-requests", "96",
            "--input-tokens", "300", "--output-tokens", "lognormal:400:0.6",
            "--scrape-interval", "0.1", "--quiet")
    db = tmp_path / "c.duckdb"
    truth = {}
    for name, flags in (("spec", ("--speculative-config", spec)), ("base", ())):
        with running_engine(*common, *flags) as eng:
            r = infbench("run", "--url", eng.url, "--db", str(db), *load, timeout=300)
            assert r.returncode == 0, r.stderr[-2000:]
            truth[name] = step_log_throughput(eng.get_json("/engine/steps?after=0")["steps"])
    ratios = {b: truth["spec"][b] / truth["base"][b]
              for b in sorted(truth["spec"].keys() & truth["base"].keys())}
    truth_from = next(b for b, r in ratios.items() if r < 1.0 and all(
        x < 1.0 for c, x in ratios.items() if c >= b))
    assert max(ratios.values()) > 1.2  # it paid somewhere: the crossover is a crossover
    con = open_store(db)
    try:
        runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY created_at").fetchall()]
    finally:
        con.close()
    r = infbench("diagnose", "specdec", runs[0], "--baseline", runs[1], "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    findings = out["findings"]
    costs = [f for f in findings if f["verdict"] == "spec_costs_throughput"]
    assert len(costs) == 1, ([(f["verdict"], f["summary"]) for f in findings], out["notes"], ratios)
    found = costs[0]["scope"]["batch_size_from"]
    # the engine's own step log, stored with the run, gives the counters' acceptance
    acc = next(f for f in findings if f["verdict"] in ("spec_acceptance", "spec_low_acceptance"))
    counted = next(e["values"] for e in acc["evidence"] if e["name"] == "spec_decode_counters")
    logged = next(e["values"] for e in acc["evidence"] if e["name"] == "engine_step_log")
    assert logged["acceptance_rate"] == pytest.approx(counted["acceptance_rate"], rel=0.01)
    assert abs(found.bit_length() - truth_from.bit_length()) <= 1, (found, ratios)


def _stream(eng, prompt: str, max_tokens: int) -> tuple[str, int, int]:
    """(text, content events, completion tokens) of one greedy streamed completion."""
    status, _, raw = eng.request("POST", "/v1/completions", {
        "model": "qwen2.5-3b-instruct", "prompt": prompt, "max_tokens": max_tokens,
        "temperature": 0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}})
    assert status == 200
    events = [json.loads(line[6:]) for line in raw.decode().splitlines()
              if line.startswith("data: {")]
    content = [e["choices"][0]["text"] for e in events if e["choices"] and e["choices"][0]["text"]]
    return "".join(content), len(content), events[-1]["usage"]["completion_tokens"]


def test_streamed_text_is_the_same_and_a_step_sends_its_tokens_at_once() -> None:
    prompt = "the list goes red, green, blue; " * 12
    common = ("--sim-copy-probability", "0.9", "--seed", "21")
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 3,
                       "prompt_lookup_max": 4})
    with running_engine(*common) as eng:
        plain = _stream(eng, prompt, 80)
    with running_engine(*common, "--speculative-config", spec) as eng:
        fast = _stream(eng, prompt, 80)
        m = eng.metrics()
    assert fast[0] == plain[0] and fast[2] == plain[2] == 80
    assert plain[1] == 80
    # each decode step's tokens arrive as one event: fewer events by the accepted drafts
    assert fast[1] == 80 - m["vllm:spec_decode_num_accepted_tokens_total"]
