"""The Prometheus text format, read one way: `infbench.promtext` and the four places that
used to parse it themselves (the run's scraper, the GPU probe's strict reader and its stored
labels, Prometheus pulls' labels, config capture's `*_config_info` gauges).

Each case the old parsers got wrong or disagreed on is one expectation here."""

from __future__ import annotations

import math

import pytest

from infbench.config.endpoint import from_metrics
from infbench.config.model import Captured
from infbench.loadgen.telemetry.scrape import parse_prometheus
from infbench.promtext import (
    ExpositionError,
    escape,
    format_labels,
    parse_labels,
    parse_raw,
    parse_strict,
    unescape,
)
from probes.gpu.exposition import parse_exposition
from probes.gpu.run_metrics import parse_labels as stored_gpu_labels
from probes.prometheus.labels import parse_labels as pulled_labels

# (line, lenient (name, raw labels, value), strict labels). Old scrape.py split at the last
# `}` on the line and at the first space: an exemplar's braces or value took the sample's.
LINES = [
    ('m{path="a}b",x="{",y=","} 3', ("m", 'path="a}b",x="{",y=","', 3.0),
     {"path": "a}b", "x": "{", "y": ","}),
    ('m{a="b"} 1 # {trace_id="x"} 7', ("m", 'a="b"', 1.0), {"a": "b"}),  # old: 7, labels mangled
    ('m 1 # {trace_id="x"} 7', ("m", "", 1.0), {}),  # old: name 'm 1 #', value 7
    ('m{a="b"} 1 # {trace_id="x y"} 7 1700000000.5', ("m", 'a="b"', 1.0), {"a": "b"}),
    ('m{a="x\\\\"} 2', ("m", 'a="x\\\\"', 2.0), {"a": "x\\"}),  # a value ending in a backslash
    ('m{a="q\\"}\\"",b="c"} 4', ("m", 'a="q\\"}\\"",b="c"', 4.0), {"a": 'q"}"', "b": "c"}),
    ('m{a="b"} 5 1700000000000', ("m", 'a="b"', 5.0), {"a": "b"}),
    ('m{a="b"}    6', ("m", 'a="b"', 6.0), {"a": "b"}),
    ('m {a="b"} 7', ("m", 'a="b"', 7.0), {"a": "b"}),  # old strict: "bad value"
    ("m\t8", ("m", "", 8.0), {}),  # old scrape: skipped (split at a space only)
    ("  m 9", ("m", "", 9.0), {}),  # old scrape: skipped
    ('m{a = "1" , b="2",} 10', ("m", 'a = "1" , b="2",', 10.0), {"a": "1", "b": "2"}),
    ('m{le="+Inf"} +Inf', ("m", 'le="+Inf"', math.inf), {"le": "+Inf"}),
    ("m -Inf", ("m", "", -math.inf), {}),
]


@pytest.mark.parametrize(("line", "lenient", "labels"), LINES)
def test_sample_lines_are_split_the_same_way_by_every_reader(
        line: str, lenient: tuple[str, str, float], labels: dict[str, str]) -> None:
    assert parse_raw(line) == parse_prometheus(line) == [lenient]
    (s,) = parse_strict(line)
    assert (s.name, s.labels, s.value) == (lenient[0], labels, lenient[2])
    assert parse_exposition(line)[0] == s
    assert parse_labels(lenient[1]) == stored_gpu_labels(lenient[1]) == pulled_labels(lenient[1]) == labels


def test_nan_and_the_value_as_written() -> None:
    nan, blank = parse_strict('DCGM_FI_DEV_XID_ERRORS{gpu="0"} NaN\nm 9223372036854775794\n')
    assert math.isnan(nan.value) and nan.raw == "NaN"
    assert blank.raw == "9223372036854775794"  # DCGM's blank sentinel: exact only as written
    assert math.isnan(parse_raw("m nan")[0][2])


def test_comments_blank_lines_and_help_with_braces_carry_no_sample() -> None:
    text = ("# HELP m a help text with {braces} and 5\n# TYPE m gauge\n\n   \n"
            "  # an indented comment 5\nm 1\n# EOF\n")
    assert parse_raw(text) == [("m", "", 1.0)]
    assert [(s.name, s.value) for s in parse_strict(text)] == [("m", 1.0)]


@pytest.mark.parametrize("line", [
    "{} 5",  # no name (old scrape: stored under the name '')
    'm{a="}" 1',  # the label set never closes
    'm{a="x\\"} 1',  # the quote is escaped: the value never ends
    'm{a="b"}',  # no value
    'm{a="b"} # {trace_id="x"} 1',  # no value before the exemplar
    "m five",
    "m 1_000",  # float() reads 1000; no writer prints it
])
def test_lines_the_lenient_reader_skips_rather_than_misread(line: str) -> None:
    assert parse_raw(line) == []
    with pytest.raises(ExpositionError, match="^line 1: "):
        parse_strict(line)


@pytest.mark.parametrize(("line", "why"), [
    ("m-1 5", "bad metric name"),  # old strict: name 'm', value -1, timestamp 5
    ("m 1 abc", "bad number"),  # old strict: a timestamp never checked
    ('m{a="1" b="2"} 1', "expected ','"),
    ('m{a="1",a="2"} 1', "given twice"),  # old: the last one won silently
    ('m{,a="b"} 1', "cannot read labels"),
    ("m{a=1} 1", "cannot read labels"),
    ("m 1 # nope", "bad exemplar"),
    ('m 1 # {x="y"}', "after the exemplar"),
    ("m 1 2 3", "at most a timestamp"),
])
def test_strict_names_the_fault(line: str, why: str) -> None:
    with pytest.raises(ExpositionError, match=why):
        parse_strict(line)


def test_strict_names_the_line() -> None:
    with pytest.raises(ExpositionError, match="^line 4: "):
        parse_strict('# HELP m x\nm 1\n\nm{gpu="0" 2\nm 3\n')


@pytest.mark.parametrize(("printed", "value"), [
    ("a\\\\nb", "a\\nb"),  # an escaped backslash, then n: not a newline
    ("a\\nb", "a\nb"),
    ('\\"q\\"', '"q"'),
    ("x\\\\", "x\\"),
    ("x\\ty", "x\\ty"),  # an escape the format does not define stays as written (old stored-label reader: 'xty')
    ("plain", "plain"),
])
def test_escapes_are_undone_in_one_pass(printed: str, value: str) -> None:
    assert unescape(printed) == value
    text = f'k="{printed}"'
    assert parse_labels(text) == stored_gpu_labels(text) == pulled_labels(text) == {"k": value}
    assert parse_strict(f"m{{{text}}} 1")[0].labels == {"k": value}


@pytest.mark.parametrize("value", ["x\\ny", 'q"t', "l1\nl2", "\\", "a\\\\n", "GPU-0\\n\"1\"", "}{,=# "])
def test_escape_and_format_round_trip(value: str) -> None:
    labels = {"b": value, "a": "plain"}
    assert format_labels(labels) == f'a="plain",b="{escape(value)}"'
    assert parse_labels(format_labels(labels)) == labels
    (lenient,) = parse_raw(f"m{{{format_labels(labels)}}} 1 # {{trace_id=\"{escape(value)}\"}} 2")
    assert parse_labels(lenient[1]) == labels and lenient[2] == 1.0


def test_lenient_labels_stop_at_what_they_cannot_read() -> None:
    # Old stored-label reader: {'a': '1', 'c': '3'} (a pair past the junk guessed at) and
    # {'b': '2'} for spaces around `=`.
    assert parse_labels('a="1",b=2,c="3"', strict=False) == {"a": "1"}
    assert stored_gpu_labels('a = "1" , b="2"') == {"a": "1", "b": "2"}
    assert stored_gpu_labels('a="1" b="2"') == {"a": "1", "b": "2"}  # a missing comma let pass
    assert stored_gpu_labels(None) == stored_gpu_labels("") == {}
    with pytest.raises(ValueError, match="cannot read"):
        pulled_labels('a="1",b=2')


def _config(body: str) -> dict[str, object]:
    cap = Captured("unknown", None, "live_endpoint", "test")
    from_metrics(body, cap)
    return cap.values()


def test_config_info_gauges_read_as_every_other_sample() -> None:
    # Old: a line with a timestamp, or a space before `{`, was not seen; values kept their escapes.
    assert _config('vllm:cache_config_info{block_size="16"} 1 1700000000000\n') == {"block_size": 16}
    assert _config('vllm:cache_config_info {block_size="32"} 1.0\n') == {"block_size": 32}
    assert _config('vllm:cache_config_info{cache_dtype="a\\"b}"} 1\n') == {"kv_cache_dtype": 'a"b}'}
    assert _config('# HELP vllm:cache_config_info {block_size="8"}\nvllm:cache_config_info_x{block_size="8"} 1\n') == {}
