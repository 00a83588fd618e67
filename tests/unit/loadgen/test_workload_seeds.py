"""One seed, separate streams: schedule and lengths never follow the text; the salt only
changes the text; --reuse-prompts (no salt) repeats it byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads import (
    MultiTurn,
    SharedPrefix,
    ShareGPT,
    Structured,
    Synthetic,
    TokenModel,
    Trace,
    Workload,
)
from infbench.loadgen.workloads.base import RequestSpec
from infbench.loadgen.workloads.lengths import LengthDist

L = LengthDist.parse
# Calibrations of very different targets: one token per word (a BPE vocabulary) and the
# reference engine's byte tokenizer (some 5 tokens per word plus a chat template).
BPE = TokenModel(1.0, 1.0, "measured")
BYTES = TokenModel(4.7, 42.0, "measured")


def _workloads(tokens: TokenModel, tmp: Path) -> dict[str, Workload]:
    share = tmp / "share.json"
    if not share.exists():
        share.write_text(json.dumps([{"conversations": [
            {"from": "human", "value": f"question {i} " * (i + 1)},
            {"from": "gpt", "value": "answer " * (3 * i + 2)}]} for i in range(7)]))
    trace = tmp / "t.jsonl"
    if not trace.exists():
        trace.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 600 + i,
                                             "output_length": 3 + i, "hash_ids": [1, 2 + i % 2]}) + "\n"
                                 for i in range(12)))
    return {
        "synthetic-lognormal": Synthetic(L("lognormal:300:0.5", "i"), L("uniform:4:40", "o"), tokens),
        "synthetic-uniform": Synthetic(L("uniform:50:900", "i"), L("normal:30:5", "o"), tokens),
        "prefix": SharedPrefix(3, 64, L("uniform:8:80", "i"), L("uniform:4:12", "o"), tokens),
        "structured": Structured(L("lognormal:120:0.4", "i"), L("uniform:8:30", "o"), tokens),
        "multiturn": MultiTurn(3, L("uniform:70:160", "i"), L("uniform:2:9", "o"), tokens),
        "sharegpt": ShareGPT(share, tokens, L("uniform:5:50", "o")),
        "trace": Trace(trace, tokens),
    }


def _plan(wl: Workload, streams: Streams, arrivals: Arrivals, n: int) -> list[tuple[Any, ...]]:
    """What the runner's open loop would send: session k gets arrival offset k; every turn of
    a conversation is answered with a fixed reply. (offset, key, label, targets, text)."""
    offsets = arrivals.offsets(streams.arrivals()) if arrivals.kind != "trace" else None
    out: list[tuple[Any, ...]] = []
    for k, sess in enumerate(islice(wl.sessions(streams), n)):
        spec: RequestSpec | None = next(sess)
        at = next(offsets) if offsets is not None else spec.at
        while spec is not None:
            out.append((at, (k, spec.turn or 0), spec.label, spec.target_input_tokens, spec.max_tokens,
                        spec.prompt if spec.prompt is not None else json.dumps(spec.messages)))
            at = None
            try:
                spec = sess.send("a fixed reply")
            except StopIteration:
                spec = None
    return out


def _user_text(text: str) -> str:
    """The first user message of a conversation (JSON), or the prompt itself."""
    return json.loads(text)[0]["content"] if text.startswith("[{") else text


def _shape(plan: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [p[:5] for p in plan]


def _texts(plan: list[tuple[Any, ...]]) -> list[str]:
    return [p[5] for p in plan]


ARRIVALS = [Arrivals("poisson", rate=30.0), Arrivals("gamma", rate=12.0, burstiness=0.3),
            Arrivals("constant", rate=5.0)]
NAMES = ["synthetic-lognormal", "synthetic-uniform", "prefix", "structured", "multiturn", "sharegpt", "trace"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("arrivals", ARRIVALS, ids=lambda a: a.kind)
@pytest.mark.parametrize("seed", [0, 11, 2**40 + 3])
def test_calibration_changes_only_the_text(tmp_path: Path, name: str, arrivals: Arrivals, seed: int) -> None:
    a = Arrivals("trace") if name == "trace" else arrivals
    for salt in (None, 99):
        bpe = _plan(_workloads(BPE, tmp_path)[name], Streams(seed, salt), a, 40)
        byt = _plan(_workloads(BYTES, tmp_path)[name], Streams(seed, salt), a, 40)
        assert _shape(bpe) == _shape(byt)
        if name != "sharegpt":  # ShareGPT's text is the dataset's (and a fixed count of salt words)
            assert _texts(bpe) != _texts(byt)


@pytest.mark.parametrize("name", NAMES)
def test_salt_changes_only_the_text_and_breaks_the_first_block(tmp_path: Path, name: str) -> None:
    wl = _workloads(BYTES, tmp_path)[name]
    a = Arrivals("trace") if name == "trace" else Arrivals("poisson", rate=8.0)
    runs = [_plan(wl, Streams(5, salt), a, 60) for salt in (1, 2, 2**64 - 1, 0)]
    assert all(_shape(r) == _shape(runs[0]) for r in runs)
    # The first 16 characters of the user's text: one KV block of the byte tokenizer, the
    # smallest first block any server caches. Request k of one run never shares it with
    # request k of another (a shared leading salt would fail here, and so would a fixed
    # instruction at the start of every prompt).
    first = [[_user_text(t)[:16] for t in _texts(r)] for r in runs]
    for i, x in enumerate(first):
        for y in first[i + 1:]:
            assert sum(p == q for p, q in zip(x, y, strict=True)) == 0
    for i, x in enumerate(runs):
        for y in runs[i + 1:]:
            assert not set(_texts(x)) & set(_texts(y))


def test_reused_prompts_repeat_byte_for_byte(tmp_path: Path) -> None:
    for name in NAMES:
        wl = _workloads(BYTES, tmp_path)[name]
        a = Arrivals("trace") if name == "trace" else Arrivals("gamma", rate=3.0, burstiness=2.0)
        again = [_plan(wl, Streams(21, None), a, 30) for _ in range(2)]
        assert again[0] == again[1]
        # salt 0 is a salt: it must not reproduce the unsalted text
        assert _texts(_plan(wl, Streams(21, 0), a, 30)) != _texts(again[0])


def test_seeds_differ_and_bad_seeds_are_refused() -> None:
    wl = Synthetic(L("uniform:10:1000", "i"), L("uniform:1:1000", "o"), BPE)
    a = Arrivals("poisson", rate=1.0)
    plans = {s: _shape(_plan(wl, Streams(s, 1), a, 20)) for s in (0, 1, 2**32, 2**32 + 1)}
    assert len({json.dumps(p) for p in plans.values()}) == 4
    for bad in (-1, 1.5, "3"):
        with pytest.raises(ValueError, match="seed"):
            Streams(bad)  # type: ignore[arg-type]
    for bad_salt in (-1, 2**64):
        with pytest.raises(ValueError, match="salt"):
            Streams(0, bad_salt)
    with pytest.raises(ValueError, match="conversation"):
        Streams(0).conversation_text(2**32)


def test_streams_do_not_share_draws() -> None:
    """Drawing any amount from one stream leaves every other stream where it was."""
    s = Streams(4, 7)
    before = [g.random(3).tolist() for g in (s.arrivals(), s.input_lengths(), s.output_lengths(), s.choices())]
    s.text().random(10_000)
    after = [g.random(3).tolist() for g in (s.arrivals(), s.input_lengths(), s.output_lengths(), s.choices())]
    assert before == after
    assert len({json.dumps(x) for x in before}) == 4  # and they are different streams


def _advance(conv: Iterator[RequestSpec], first: RequestSpec, got: list[RequestSpec]) -> None:
    got.append(first)
    for _ in range(2):
        got.append(conv.send("reply"))  # type: ignore[attr-defined]


@pytest.mark.parametrize("salt", [None, 3])
def test_conversations_do_not_depend_on_how_turns_interleave(salt: int | None) -> None:
    wl = MultiTurn(3, L("uniform:5:50", "i"), L("uniform:1:20", "o"), BYTES)

    def run(order: list[int]) -> dict[tuple[int, int], tuple[Any, ...]]:
        convs = list(islice(wl.sessions(Streams(8, salt)), 3))
        firsts = [next(c) for c in convs]
        got: list[RequestSpec] = []
        for k in order:  # one conversation runs all its turns before the next one starts
            _advance(convs[k], firsts[k], got)
        return {(r.conversation_id or 0, r.turn or 0): (r.target_input_tokens, r.max_tokens,
                                                        json.dumps(r.messages)) for r in got}

    forward, backward = run([0, 1, 2]), run([2, 1, 0])
    if salt is None:
        assert forward == backward
    else:
        assert {k: v[:2] for k, v in forward.items()} == {k: v[:2] for k, v in backward.items()}


def test_shared_prefix_is_shared_within_a_run_not_across_runs() -> None:
    wl = SharedPrefix(2, 40, L("8", "s"), L("4", "o"), BYTES)
    words = BYTES.words_for(40)

    def prefixes(salt: int | None) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for sess in islice(wl.sessions(Streams(1, salt)), 40):
            spec = next(sess)
            out.setdefault(spec.label, set()).add(" ".join((spec.prompt or "").split()[:words]))
        return out

    one, two = prefixes(1), prefixes(2)
    assert set(one) == set(two) == {"group-0", "group-1"}
    assert all(len(v) == 1 for v in (*one.values(), *two.values()))
    assert not (one["group-0"] | one["group-1"]) & (two["group-0"] | two["group-1"])
    assert prefixes(None) == prefixes(None)


def test_structured_prompts_start_with_the_salted_context() -> None:
    wl = Structured(L("60", "i"), L("9", "o"), BPE)
    specs = [next(s) for s in islice(wl.sessions(Streams(0, 1)), 30)]
    assert not any((s.prompt or "").startswith("Return") for s in specs)
    assert all((s.prompt or "").endswith(f"Return one {s.label} as JSON.") for s in specs)
    assert len({(s.prompt or "").split()[0] for s in specs}) > 10


def test_length_stream_is_the_batched_sample() -> None:
    for text in ("7", "uniform:3:9", "normal:100:30", "lognormal:64:1.2"):
        d = L(text, "x")
        got = list(islice(d.stream(np.random.default_rng(5), batch=16), 40))
        rng = np.random.default_rng(5)
        want = [*d.sample(rng, 16).tolist(), *d.sample(rng, 16).tolist(), *d.sample(rng, 16).tolist()][:40]
        assert got == want
