"""Workload files are read and checked before a run: what cannot be sent is one error naming
the file, the row and the field; what is skipped, sorted or changed is counted and warned
about; the config says which rows were used. Never a traceback, never a silent change."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from infbench.loadgen.preflight import Target
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workloads import ShareGPT, TokenModel, Trace
from infbench.loadgen.workloads.build import build_workload, shortest_prompt, workload_warnings
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.trace import load_trace

BYTES = TokenModel(1.0, 0.0, "tokenize", per_letter=1.0, exact=True)


def _csv(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _jsonl(tmp: Path, name: str, rows: list[dict]) -> Path:
    path = tmp / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _specs(trace: Trace, n: int = 100) -> list:
    return [next(s) for s in islice(trace.sessions(Streams(0, 1)), n)]


@pytest.mark.parametrize(("text", "order"), [
    ("timestamp,input_tokens,output_tokens\n0,100,5\n2,101,5\n1,102,5\n3,103,5\n", [100, 102, 101, 103]),
    ("time,prompt_tokens,completion_tokens\n5,10,1\n1,20,2\n3,30,3\n0,40,4\n", [40, 20, 30, 10]),
])
def test_rows_out_of_time_order_are_sent_sorted_and_counted(tmp_path: Path, text: str, order: list[int]) -> None:
    trace = Trace(_csv(tmp_path, "t.csv", text), BYTES)
    specs = _specs(trace)
    assert [s.target_input_tokens for s in specs] == order
    assert [s.at for s in specs] == sorted(s.at for s in specs) and specs[0].at == 0
    (warning,) = trace.warnings()
    late = sum(1 for a, b in zip(order, order[1:], strict=False) if b < a) or 1
    assert "t.csv" in warning and "timestamp order" in warning and "first: row" in warning
    assert trace.describe()["rows"]["changes"]["order"] >= late


def test_the_schedule_is_the_sorted_trace_scaled(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, "m.jsonl", [{"timestamp": t, "input_length": 600, "output_length": 2}
                                         for t in (400, 0, 200, 1000)])
    tab = load_trace(path, start_s=0.1, end_s=0.5, time_scale=2.0)
    assert tab.at.tolist() == pytest.approx([0.0, 0.4]) and tab.rows.tolist() == [3, 1]


@pytest.mark.parametrize(("text", "field"), [
    ("timestamp,input_tokens,output_tokens\n0,-50,5\n", "input_tokens is -50"),
    ("timestamp,input_tokens,output_tokens\n0,50,5\n1,60,-1\n", "row 2: output_tokens is -1"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12.5,3\n", "contexttokens '12.5'"),
    ("timestamp,input_tokens,output_tokens\n0,many,5\n", "input_tokens 'many'"),
    ("timestamp,input_tokens,output_tokens\nyesterday,5,5\n", "timestamp 'yesterday'"),
    ("timestamp,input_tokens,output_tokens\nnan,5,5\n", "timestamp 'nan'"),
    ("timestamp,input_tokens,output_tokens\n0,5\n", "output_tokens is empty"),
    ("timestamp,input_tokens\n0,100\n", "no output-token column"),
    ("input_tokens,output_tokens\n100,5\n", "no time column"),
    ("when,in,out\n1,2,3\n", "no time column"),
])
def test_what_cannot_be_sent_is_one_line_naming_file_row_and_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ValueError) as exc:
        Trace(_csv(tmp_path, "bad.csv", text), BYTES).load()
    msg = str(exc.value)
    assert msg.startswith("trace: bad.csv row ") and field in msg and "\n" not in msg


@pytest.mark.parametrize(("rows", "field"), [
    ([{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": "abc"}], "hash_ids"),
    ([{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1, 2.5]}], "hash_ids"),
    ([{"timestamp": 0, "input_length": True, "output_length": 2}], "input_length"),
    ([{"timestamp": 0, "input_length": 10, "output_length": 2}, [1, 2]], "row 2: not an object"),
])
def test_bad_jsonl_rows_name_their_row(tmp_path: Path, rows: list, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Trace(_jsonl(tmp_path, "bad.jsonl", rows), BYTES).load()
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 1,\n')
    with pytest.raises(ValueError, match="broken.jsonl row 2: not valid JSON"):
        Trace(broken, BYTES).load()


@pytest.mark.parametrize(("text", "msg"), [
    ("", "has no rows"), ("\n\n", "has no rows"),
    ("timestamp,input_tokens,output_tokens\n", "has a header but no rows"),
    ("timestamp,input_tokens,output_tokens\n0,0,5\n", "every row"),
])
def test_empty_and_header_only_files_are_errors(tmp_path: Path, text: str, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        Trace(_csv(tmp_path, "e.csv", text), BYTES).load()


def test_a_slice_with_no_rows_says_what_the_trace_spans(tmp_path: Path) -> None:
    path = _csv(tmp_path, "s.csv", "timestamp,input_tokens,output_tokens\n0,10,1\n4,10,1\n")
    with pytest.raises(ValueError, match=r"no row of s.csv falls between --trace-start 5 s .* span 0 to 4.000 s"):
        Trace(path, BYTES, start_s=5.0).load()


def test_zero_lengths_are_skipped_or_raised_and_counted(tmp_path: Path) -> None:
    path = _csv(tmp_path, "z.csv", "timestamp,input_tokens,output_tokens\n0,0,5\n1,100,0\n2,100,4\n3,0,1\n4,50,0\n")
    trace = Trace(path, BYTES)
    specs = _specs(trace)
    assert [(s.target_input_tokens, s.max_tokens) for s in specs] == [(100, 1), (100, 4), (50, 1)]
    warnings = trace.warnings()
    assert any("2 of 5 rows have 0 input tokens and are skipped" in w and "first: row 1" in w for w in warnings)
    assert any("2 of 5 rows have 0 output tokens and are sent with max_tokens 1" in w and "row 2" in w
               for w in warnings)
    rows = trace.describe()["rows"]
    assert (rows["rows_read"], rows["rows_used"], rows["first_row_used"], rows["last_row_used"]) == (5, 3, 2, 5)


@pytest.mark.parametrize(("n_in", "ids", "shared"), [
    (700, [1, 2, 3], 512),  # one id too many: dropped
    (1500, [1], 512),       # two blocks without ids: fresh text
    (1024, [1, 9], 1024),   # agrees: no warning
])
def test_mooncake_length_and_hash_ids_disagreement_is_counted(tmp_path: Path, n_in: int, ids: list[int],
                                                               shared: int) -> None:
    path = _jsonl(tmp_path, "mc.jsonl", [{"timestamp": 0, "input_length": 1024, "output_length": 2, "hash_ids": [1, 9]},
                                         {"timestamp": 5, "input_length": n_in, "output_length": 2, "hash_ids": ids}])
    trace = Trace(path, BYTES)
    specs = _specs(trace)
    for s in specs:  # every prompt has its row's length (the byte model is the engine's count)
        assert len((s.prompt or "").encode()) + 1 == s.target_input_tokens
    assert list(trace.shared_prefix_tokens())[1] == shared
    first_block = " ".join((specs[0].prompt or "").split()[:40])
    assert (specs[1].prompt or "").startswith(first_block)
    warned = [w for w in trace.warnings() if "hash_ids" in w]
    assert len(warned) == (0 if n_in == 1024 else 1)


def _sharegpt(tmp: Path, records: list) -> ShareGPT:
    path = tmp / "sg.json"
    path.write_text(json.dumps(records))
    return ShareGPT(path, BYTES)


def test_sharegpt_records_skipped_or_changed_are_counted_by_reason(tmp_path: Path) -> None:
    ok = [{"from": "human", "value": "a question"}, {"from": "gpt", "value": "an answer"}]
    wl = _sharegpt(tmp_path, [
        {"conversations": ok},
        {"conversations": [{"from": "system", "value": "be brief"}, *ok]},
        {"conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        {"conversations": [{"from": "human", "value": "alone"}]},
        {"conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "y"}]},
        {"conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": "z"}]},
        {"conversations": [{"from": "human", "value": 5}, {"from": "gpt", "value": "z"}]},
        {"id": "no conversations"}, "not a record",
    ])
    assert len(wl.load()) == 3
    warnings = wl.warnings()
    expect = ["1 of 9 records begin with a system turn", "1 of 9 records have a single turn",
              "1 of 9 records do not open with a human/user turn", "2 of 9 records have an empty or non-text",
              "2 of 9 records have no 'conversations' list"]
    assert len(warnings) == len(expect)
    for e in expect:
        assert any(e in w for w in warnings), (e, warnings)
    rows = wl.describe()["rows"]
    assert (rows["records_read"], rows["records_used"]) == (9, 3)
    prompts = [next(s).prompt or "" for s in islice(wl.sessions(Streams(0, None)), 3)]
    assert not any("be brief" in p for p in prompts)


@pytest.mark.parametrize(("content", "msg"), [
    ("[]", "no conversation starting human"), ('{"a": 1}', "not a JSON list"),
    ("[{", "not valid JSON"), ('[{"conversations": [{"from": "human", "value": "x"}]}]', "single turn"),
])
def test_unusable_sharegpt_files_are_one_line(tmp_path: Path, content: str, msg: str) -> None:
    path = tmp_path / "d.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=msg) as exc:
        ShareGPT(path, BYTES).load()
    assert "\n" not in str(exc.value) and str(exc.value).startswith("dataset: ")


def _target(tokens: TokenModel) -> Target:
    return Target("http://127.0.0.1:1", "m", ["m"], tokens, True, None, None)


def _build(kind: str, tokens: TokenModel, input_tokens: str, **kw: object):
    args = dict(prefix_groups=2, prefix_tokens=300, turns=2, dataset=None, trace=None, time_scale=1.0,
                trace_start=0.0, trace_end=None)
    args.update(kw)
    return build_workload(kind, input_len=LengthDist.parse(input_tokens, "input_tokens"),
                          output_len=LengthDist.parse("4", "output_tokens"), target=_target(tokens), **args)


CHAT_BYTES = TokenModel(1.0, 99.0, "tokenize", per_letter=1.0, exact=True)


@pytest.mark.parametrize(("kind", "length", "kw"), [
    ("synthetic", "50", {}), ("structured", "101", {}), ("prefix", "10", {"prefix_tokens": 80})])
def test_a_fixed_length_below_the_shortest_prompt_is_an_error(kind: str, length: str, kw: dict) -> None:
    assert shortest_prompt(CHAT_BYTES) == 102
    with pytest.raises(ValueError, match="shorter than the shortest .* \\(102 tokens: 99 of BOS/template"):
        _build(kind, CHAT_BYTES, length, **kw)


def test_lengths_below_the_shortest_prompt_are_a_counted_warning() -> None:
    wl = _build("synthetic", CHAT_BYTES, "uniform:50:250")
    (warning,) = workload_warnings(wl)
    share = float(np.mean(LengthDist.parse("uniform:50:250", "x").sample(np.random.default_rng(0), 20_000) < 102))
    assert f"{share:.1%} of the lengths uniform:50:250 draws" in warning
    assert workload_warnings(_build("synthetic", CHAT_BYTES, "uniform:200:900")) == []


def test_trace_options_are_checked_before_reading(tmp_path: Path) -> None:
    path = _csv(tmp_path, "o.csv", "timestamp,input_tokens,output_tokens\n0,10,1\n")
    for kw, msg in (({"time_scale": 0.0}, "time_scale"), ({"trace_start": 2.0, "trace_end": 1.0}, "trace_start")):
        with pytest.raises(ValueError, match=msg):
            _build("trace", BYTES, "10", trace=path, **kw)
