"""Building the workload a command line asks for; the default output length is no magic
string: passing the default's value explicitly to ShareGPT still forces it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infbench.loadgen.preflight import Target
from infbench.loadgen.workloads import ShareGPT, Synthetic, TokenModel
from infbench.loadgen.workloads.build import DEFAULT_OUTPUT_TOKENS, build_workload
from infbench.loadgen.workloads.lengths import LengthDist


def _target() -> Target:
    return Target("http://127.0.0.1:1", "m", ["m"], TokenModel(1.3, 0.0, "measured"), True, None, None)


def _build(kind: str, out: str | None, **kw: object):
    args = dict(prefix_groups=2, prefix_tokens=32, turns=2, dataset=None, trace=None,
                time_scale=1.0, trace_start=0.0, trace_end=None)
    args.update(kw)
    return build_workload(kind, input_len=LengthDist.parse("64", "input_tokens"),
                          output_len=None if out is None else LengthDist.parse(out, "output_tokens"),
                          target=_target(), **args)


def test_sharegpt_uses_reply_lengths_unless_an_output_length_is_given(tmp_path: Path) -> None:
    data = tmp_path / "s.json"
    data.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi there"},
                                                   {"from": "gpt", "value": "hello " * 9}]}]))
    assert _build("sharegpt", None, dataset=data).describe()["output_tokens"] == "from dataset"
    forced = _build("sharegpt", DEFAULT_OUTPUT_TOKENS, dataset=data)
    assert isinstance(forced, ShareGPT)
    assert forced.describe()["output_tokens"] == DEFAULT_OUTPUT_TOKENS


def test_other_workloads_take_the_default_when_none_is_given() -> None:
    wl = _build("synthetic", None)
    assert isinstance(wl, Synthetic) and wl.describe()["output_tokens"] == DEFAULT_OUTPUT_TOKENS


@pytest.mark.parametrize(("kind", "kw", "msg"), [
    ("sharegpt", {}, "needs --dataset"), ("trace", {}, "needs --trace"),
    ("sharegpt", {"dataset": Path("/nonexistent.json")}, "does not exist"),
    ("nope", {}, "is not one of")])
def test_bad_choices_name_the_option(kind: str, kw: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        _build(kind, None, **kw)
