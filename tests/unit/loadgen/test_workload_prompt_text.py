"""--prompt-text: repetitive prompts give an n-gram drafter something to copy, salted ones
do not; both are sized as the token model asks."""

from __future__ import annotations

import itertools

import pytest

from infbench.loadgen.preflight import Target
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads import TokenModel
from infbench.loadgen.workloads.build import build_workload
from infbench.loadgen.workloads.lengths import LengthDist


def _workload(kind: str, prompt_text: str, input_tokens: str = "300"):
    target = Target("http://127.0.0.1:1", "m", ["m"], TokenModel(1.4, 3.0, "measured"), True, None, None)
    return build_workload(kind, input_len=LengthDist.parse(input_tokens, "input_tokens"),
                          output_len=LengthDist.parse("20", "output_tokens"), target=target,
                          prefix_groups=2, prefix_tokens=32, turns=2, dataset=None, trace=None,
                          time_scale=1.0, trace_start=0.0, trace_end=None, prompt_text=prompt_text)


def _prompts(prompt_text: str, n: int, input_tokens: str = "300", salt: int = 5) -> list[str]:
    wl = _workload("synthetic", prompt_text, input_tokens)
    sessions = itertools.islice(wl.sessions(Streams(seed=3, salt=salt)), n)
    return [next(iter(s)).prompt for s in sessions]


def _recurring_share(prompt: str, n: int = 4) -> float:
    # Share of the prompt's n-word runs that occurred earlier in it: what prompt lookup finds.
    words = prompt.split()
    seen: set[tuple[str, ...]] = set()
    hits = 0
    for i in range(len(words) - n + 1):
        gram = tuple(words[i:i + n])
        hits += gram in seen
        seen.add(gram)
    return hits / max(1, len(words) - n + 1)


@pytest.mark.parametrize("input_tokens", ["300", "uniform:120:700"])
def test_repetitive_prompts_repeat_and_salted_ones_do_not(input_tokens: str) -> None:
    rep = _prompts("repetitive", 12, input_tokens)
    salted = _prompts("salted", 12, input_tokens)
    assert min(_recurring_share(p) for p in rep) > 0.6
    assert max(_recurring_share(p) for p in salted) < 0.05
    assert len(set(rep)) == len(rep)  # each request repeats its own phrase


def test_repetitive_prompts_are_sized_like_salted_ones() -> None:
    model = TokenModel(1.4, 3.0, "measured")
    for prompt in _prompts("repetitive", 10, "260", salt=9):
        assert model.predict(prompt) == pytest.approx(260, abs=2.0)


def test_repetitive_text_depends_on_the_salt() -> None:
    assert _prompts("repetitive", 3, salt=1) != _prompts("repetitive", 3, salt=2)


@pytest.mark.parametrize("kind,prompt_text,msg", [
    ("synthetic", "loops", "prompt_text: must be one of salted, repetitive, got 'loops'"),
    ("prefix", "repetitive", "prompt_text: --prompt-text repetitive is for --workload synthetic, not prefix"),
])
def test_bad_prompt_text_is_refused_naming_the_option(kind: str, prompt_text: str, msg: str) -> None:
    with pytest.raises(ValueError) as info:
        _workload(kind, prompt_text)
    assert str(info.value) == msg


def test_describe_says_the_prompt_text_only_when_not_the_default() -> None:
    assert _workload("synthetic", "repetitive").describe()["prompt_text"] == "repetitive"
    assert "prompt_text" not in _workload("synthetic", "salted").describe()


def test_the_run_options_carry_the_prompt_text_to_the_workload() -> None:
    from infbench.pipeline.request import WorkloadSpec

    spec = WorkloadSpec.parse("synthetic", "300", "20", prompt_text="repetitive")
    target = Target("http://127.0.0.1:1", "m", ["m"], TokenModel(1.4, 3.0, "measured"), True, None, None)
    assert spec.build(target).describe()["prompt_text"] == "repetitive"
    with pytest.raises(ValueError, match="prompt_text: must be one of salted, repetitive, got 'x'"):
        WorkloadSpec.parse("synthetic", "300", "20", prompt_text="x")
