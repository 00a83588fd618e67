"""Option parsing and seeded generators: lengths, arrivals, SLOs, prompts, traces, Prometheus."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.seeds import Streams
from infbench.loadgen.telemetry.scrape import parse_prometheus
from infbench.loadgen.workloads import MultiTurn, SharedPrefix, Synthetic, TokenModel, read_trace
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.prompts import random_words
from infbench.slo import parse_slo


@pytest.mark.parametrize("text", ["512", "uniform:128:1024", "normal:512:64", "lognormal:512:0.6"])
def test_lengths_parse_and_stay_in_range(text: str) -> None:
    d = LengthDist.parse(text, "input_tokens")
    x = d.sample(np.random.default_rng(1), 5000)
    assert x.min() >= 1 and x.dtype == np.int64
    if d.kind == "uniform":
        assert x.min() >= 128 and x.max() <= 1024
    if d.kind in ("normal", "lognormal"):
        assert abs(np.median(x) - 512) < 20


@pytest.mark.parametrize("text", ["", "banana", "uniform:5", "uniform:10:5", "normal:-3:1", "fixed:1:2"])
def test_bad_lengths_name_the_field(text: str) -> None:
    with pytest.raises(ValueError, match="output_tokens"):
        LengthDist.parse(text, "output_tokens")


def test_arrival_offsets_have_the_asked_rate_and_are_seeded() -> None:
    for kind, burst in (("constant", 1.0), ("poisson", 1.0), ("gamma", 0.25)):
        a = Arrivals(kind, rate=50.0, burstiness=burst)
        xs = np.fromiter(islice(a.offsets(np.random.default_rng(3)), 20000), float)
        assert np.all(np.diff(xs) >= 0)
        assert 20000 / xs[-1] == pytest.approx(50.0, rel=0.05)
        again = np.fromiter(islice(a.offsets(np.random.default_rng(3)), 100), float)
        assert np.array_equal(xs[:100], again)
    gaps = {k: np.diff(np.fromiter(islice(Arrivals(k, rate=50.0, burstiness=0.25).offsets(
        np.random.default_rng(0)), 5000), float)) for k in ("poisson", "gamma")}
    # Burstiness < 1 spreads the gaps: coefficient of variation above Poisson's 1.
    assert gaps["gamma"].std() / gaps["gamma"].mean() > 1.5 > gaps["poisson"].std() / gaps["poisson"].mean()


@pytest.mark.parametrize(
    ("arr", "field"),
    [(Arrivals("poisson", rate=0), "rate"), (Arrivals("closed"), "concurrency"),
     (Arrivals("nope"), "arrival"), (Arrivals("gamma", rate=1, burstiness=0), "burstiness")],
)
def test_bad_arrivals_name_the_field(arr: Arrivals, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        arr.validate()


def test_slo_parsing() -> None:
    assert parse_slo("ttft=500ms,tpot=50ms,e2e=2s") == {"ttft": 500.0, "tpot": 50.0, "e2el": 2000.0}
    assert parse_slo("ttft=250") == {"ttft": 250.0}
    for bad in ("ttft", "speed=3ms", "ttft=fast"):
        with pytest.raises(ValueError, match="slo"):
            parse_slo(bad)


def test_token_model_from_probes_and_prompt_lengths() -> None:
    tm = TokenModel.from_probes((16, 80), (30, 126))
    assert tm.per_word == pytest.approx(1.5) and tm.overhead == pytest.approx(6.0)
    assert tm.words_for(156) == 100
    text = random_words(np.random.default_rng(0), 100)
    assert len(text.split()) == 100


def test_workloads_are_reproducible_from_the_seed() -> None:
    tm = TokenModel()
    wl = Synthetic(LengthDist.parse("uniform:10:50", "i"), LengthDist.parse("uniform:5:9", "o"), tm)

    def first(seed: int) -> list[tuple[str | None, int]]:
        return [(next(s).prompt, 0) for s in islice(wl.sessions(Streams(seed)), 5)]

    assert first(7) == first(7) != first(8)


def test_shared_prefix_groups_share_their_prefix() -> None:
    wl = SharedPrefix(3, 20, LengthDist.parse("5", "s"), LengthDist.parse("4", "o"), TokenModel())
    specs = [next(s) for s in islice(wl.sessions(Streams(0, salt=5)), 60)]
    by_group: dict[str, set[str]] = {}
    for sp in specs:
        by_group.setdefault(sp.label, set()).add(" ".join((sp.prompt or "").split()[:20]))
    assert len(by_group) == 3 and all(len(v) == 1 for v in by_group.values())
    assert len({next(iter(v)) for v in by_group.values()}) == 3


def test_multiturn_sends_history_and_stops_after_a_failed_turn() -> None:
    wl = MultiTurn(3, LengthDist.parse("4", "i"), LengthDist.parse("2", "o"), TokenModel())
    conv = next(wl.sessions(Streams(0, salt=5)))
    t0 = next(conv)
    t1 = conv.send("first reply")
    assert [m["role"] for m in t1.messages or []] == ["user", "assistant", "user"]
    assert (t1.messages or [])[1]["content"] == "first reply" and t1.turn == 1
    with pytest.raises(StopIteration):
        conv.send(None)
    assert t0.conversation_id == t1.conversation_id


def test_trace_formats(tmp_path: Path) -> None:
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,2\n"
                     "2023-11-16 18:15:47.1805900,20,3\n")
    rows = list(read_trace(azure))
    assert [(r.input_tokens, r.output_tokens) for r in rows] == [(10, 2), (20, 3)]
    assert rows[1].t - rows[0].t == pytest.approx(0.5)
    moon = tmp_path / "m.jsonl"
    moon.write_text(json.dumps({"timestamp": 1500, "input_length": 9, "output_length": 1, "hash_ids": [4]}) + "\n")
    (row,) = read_trace(moon)
    assert row.t == 1.5 and row.hash_ids == (4,)
    bad = tmp_path / "b.csv"
    bad.write_text("when,in,out\n1,2,3\n")
    with pytest.raises(ValueError, match="b.csv row 1"):
        list(read_trace(bad))


def test_prometheus_parsing() -> None:
    text = ("# HELP x y\n# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="m",engine="0"} 3.0\n'
            "process_cpu_seconds_total 12.5\nbroken_line\nvllm:x{a=\"1\"} NaN 1700000000\n")
    rows = parse_prometheus(text)
    assert rows[0] == ("vllm:num_requests_running", 'model_name="m",engine="0"', 3.0)
    assert rows[1] == ("process_cpu_seconds_total", "", 12.5)
    assert rows[2][0] == "vllm:x" and np.isnan(rows[2][2])
    assert len(rows) == 3
