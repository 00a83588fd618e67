"""The reader for PyYAML's `yaml.dump` output (guidellm's benchmarks.yaml): the forms it writes
for JSON data, read as `yaml.safe_load` reads them (the expected values below are what PyYAML
6.0.4 gives for each text), and what it never writes refused with its line."""

from __future__ import annotations

import math

import pytest

from infbench.imports.dumped_yaml import DumpedYamlError, loads


@pytest.mark.parametrize(("text", "value"), [
    # Block mappings, a mapping's list at the key's indent, nested lists, empty collections.
    ("a:\n  b: 1\n  c:\n  - x\n  - - 2\n    - 3\n  - k: v\n    l: []\nd: {}\n",
     {"a": {"b": 1, "c": ["x", [2, 3], {"k": "v", "l": []}]}, "d": {}}),
    # YAML 1.1 plain scalars: null, booleans, decimal ints, floats need a dot, inf/nan.
    ("- ~\n- null\n- yes\n- Off\n- -12\n- 1.0e-05\n- 1e5\n- -.inf\n- abc def\n- http://h:1/x\n",
     [None, None, True, False, -12, 1e-05, "1e5", -math.inf, "abc def", "http://h:1/x"]),
    # Quoted strings: '' inside single quotes; escapes in double quotes.
    ("- 'it''s: #1'\n- \"tab\\there \\xE9\\u2028\\N\\\\\"\n- '010'\n- ''\n",
     ["it's: #1", "tab\there \xe9\u2028\x85\\", "010", ""]),
    # Long strings folded over lines: a break is a space, a blank line a newline; an escaped
    # break in double quotes joins with nothing, `\ ` keeps a leading space.
    ("a: one two\n  three\nb: 'x y\n\n  z'\nc: \"ab\\\n  \\ cd\"\n",
     {"a": "one two three", "b": "x y\nz", "c": "ab cd"}),
    # `? key` / `: value`, which yaml.dump writes for empty and very long keys.
    ("? ''\n: 1\nx:\n  ? 'long'\n  : - 2\n", {"": 1, "x": {"long": [2]}}),
    # A top-level scalar ends at `...`; `---` may open the document.
    ("--- \n", None), ("-.inf\n...\n", -math.inf), ("---\na: 1\n", {"a": 1}),
])
def test_what_yaml_dump_writes_reads_as_safe_load_reads_it(text: str, value: object) -> None:
    assert repr(loads(text)) == repr(value)


@pytest.mark.parametrize(("text", "line", "what"), [
    ("a: &x 1\n", 1, "anchor"),
    ("a: 1\nb: *x\n", 2, "alias"),
    ("a: !!str 1\n", 1, "tag"),
    ("a: |\n  text\n", 1, "block scalar"),
    ("a: [1, 2]\n", 1, "flow collection"),
    ("a: 0x1F\n", 1, "hex"),
    ("a: 2024-01-02\n", 1, "date"),
    ("a: 1\na: 2\n", 2, "appears twice"),
    ("1: a\n", 1, "not a string"),
    ("a: 1\n---\nb: 2\n", 2, "second document"),
    ("a: 'open\n", 1, "never closed"),
    ("a: \"\\q\"\n", 1, "escape"),
    ("a:\n  b: 1\n c: 2\n", 3, "indented deeper"),
    ("a: b: c\n", 1, "': '"),
])
def test_what_it_never_writes_is_refused_with_its_line(text: str, line: int, what: str) -> None:
    with pytest.raises(DumpedYamlError) as err:
        loads(text)
    assert err.value.line == line and what in err.value.message, err.value
