"""The Prometheus text exposition format (what `/metrics` answers), read in one place.

Every reader of `/metrics` text or of stored label text (`metric_samples.labels`, `k="v",...`
as the target printed it) goes through here, so they agree on the format's corners:

- a sample line is `name[{labels}] value [timestamp] [# exemplar]`; blank lines and `#`
  lines (`# HELP`, `# TYPE`, `# EOF`) carry no sample; whitespace may stand between the name
  and `{` and before the value;
- label values are double-quoted and may hold `}`, `,`, `{`, `=` and `#`; escapes are undone
  in one pass (`\\\\` -> backslash, `\\"` -> quote, `\\n` -> newline, any other `\\x` kept as
  written, the way Prometheus itself reads them), so an escaped backslash followed by `n` is a
  backslash and an `n`;
- values may be NaN, +Inf or -Inf; the timestamp and an OpenMetrics exemplar are ignored (the
  caller stamps the scrape).

Two readers: `parse_raw` (lenient and fast, for the once-a-second scrape during a run: a line
it cannot read is skipped, never given a wrong value; labels stay as the raw text between the
braces) and `parse_strict` (every line must be valid; the first one that is not raises one
`ExpositionError` naming its line number). The standard library only: the load generator,
the probes and config capture all import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class ExpositionError(ValueError):
    """Text that is not valid exposition format (the message names the line when there is one)."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    raw: str  # the value as written: DCGM's blank sentinels are exact only as integers


_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}
_ESCAPED = re.compile(r"\\(.)", re.S)
_PAIR = re.compile(r'[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*', re.S)
# From just after `{` through the `}` that closes the label set: braces inside quotes skipped.
_LABEL_SET = re.compile(r'(?:[^"}]|"(?:[^"\\]|\\.)*")*\}', re.S)
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def unescape(value: str) -> str:
    """A label value as printed (between its quotes) -> the value; one pass over the escapes."""
    if "\\" not in value:
        return value
    return _ESCAPED.sub(lambda m: _UNESCAPE.get(m.group(1), m.group(0)), value)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_labels(labels: dict[str, str]) -> str:
    """A dict -> `k="v",...` sorted by key (how Prometheus pulls are stored)."""
    return ",".join(f'{k}="{escape(v)}"' for k, v in sorted(labels.items()))


def parse_labels(text: str, *, strict: bool = True) -> dict[str, str]:
    """`k="v",...` (the text between a sample's braces) -> a dict, escapes undone.

    Whitespace around names, `=` and commas and one trailing comma are allowed. Strict: a pair
    that cannot be read, a missing comma or a label given twice raises `ExpositionError`. Not
    strict: the pairs read before the first unreadable one (a later pair is never guessed at),
    the last of a label given twice."""
    out: dict[str, str] = {}
    pos, n = 0, len(text)
    while pos < n:
        m = _PAIR.match(text, pos)
        if m is None:
            if text[pos:].strip(" \t") and strict:
                raise ExpositionError(f"cannot read labels at {text[pos:pos + 40]!r}")
            break
        key = m.group(1)
        if strict and key in out:
            raise ExpositionError(f"label {key!r} given twice")
        out[key] = unescape(m.group(2))
        pos = m.end()
        # Not strict, a missing comma is let pass: once a value's closing quote is found, the
        # next pair cannot be misread.
        if pos < n and text[pos] == ",":
            pos += 1
        elif pos < n and strict:
            raise ExpositionError(f"expected ',' or the end of the labels at {text[pos:pos + 40]!r}")
    return out


def parse_value(token: str) -> float:
    """A sample value (or timestamp) -> float; NaN, +Inf, -Inf in any case. Raises ValueError.
    Python's float() also takes `1_000`, which no exposition writer prints: refused."""
    if "_" in token:
        raise ValueError(token)
    return float(token)


def _close(line: str, brace: int) -> int:
    """Index of the `}` closing the label set opened at `line[brace]`, or -1."""
    close = line.find("}", brace)
    if close < 0:
        return -1
    # With no backslash before it and an even number of quotes, that `}` is outside any
    # value: the common case, decided without the regex.
    if line.find("\\", brace, close) < 0 and line.count('"', brace, close) % 2 == 0:
        return close
    m = _LABEL_SET.match(line, brace + 1)
    return m.end() - 1 if m else -1


def parse_raw(text: str) -> list[tuple[str, str, float]]:
    """(name, labels as printed between the braces, value) per sample line. Lenient: a line
    that cannot be read (no value, an unclosed label set, a value that is not a number) is
    skipped; names are not checked (it runs on every line of every scrape during a run)."""
    out = []
    for line in text.splitlines():
        if not line:
            continue
        if line[0] in " \t":  # rare: stripped only when needed
            line = line.lstrip(" \t")
            if not line:
                continue
        if line[0] == "#":
            continue
        brace = line.find("{")
        if brace == 0:  # no name
            continue
        name = line[:brace].strip() if brace > 0 else ""
        # A `{` after whitespace inside the head belongs to an exemplar (`m 1 # {...} 1`),
        # not to a label set.
        if name and " " not in name and "\t" not in name:
            close = _close(line, brace)
            if close < 0:
                continue
            labels, rest = line[brace + 1 : close], line[close + 1 :]
        else:
            head = line.split(None, 1)
            if len(head) < 2:
                continue
            name, labels, rest = head[0], "", head[1]
        fields = rest.split(None, 1)
        if not fields:
            continue
        try:
            value = parse_value(fields[0])
        except ValueError:
            continue
        out.append((name, labels, value))
    return out


def _check_tail(tokens: list[str], what: str) -> None:
    """`value [timestamp]` after a sample's (or an exemplar's) labels."""
    if not tokens or len(tokens) > 2:
        raise ExpositionError(f"expected a value and at most a timestamp after {what}")
    for t in tokens:
        try:
            parse_value(t)
        except ValueError:
            raise ExpositionError(f"bad number {t!r} after {what}") from None


def _strict_line(line: str) -> Sample:
    m = _NAME.match(line)
    if m is None:
        raise ExpositionError("no metric name")
    name, i = m.group(), m.end()
    n = len(line)
    if i < n and line[i] not in " \t{":
        raise ExpositionError(f"bad metric name at column {i + 1}")
    while i < n and line[i] in " \t":
        i += 1
    labels: dict[str, str] = {}
    if i < n and line[i] == "{":
        close = _close(line, i)
        if close < 0:
            raise ExpositionError("unterminated label set")
        labels = parse_labels(line[i + 1 : close])
        i = close + 1
    rest, hash_, exemplar = line[i:].partition("#")
    tokens = rest.split()
    _check_tail(tokens, name)
    if hash_:
        ex = exemplar.strip()
        ex_close = _close(ex, 0) if ex.startswith("{") else -1
        if ex_close < 0:
            raise ExpositionError("bad exemplar: expected '# {labels} value'")
        parse_labels(ex[1:ex_close])
        _check_tail(ex[ex_close + 1 :].split(), "the exemplar")
    return Sample(name, labels, parse_value(tokens[0]), tokens[0])


def parse_strict(text: str) -> list[Sample]:
    """Every sample of `text`; the first invalid line raises `ExpositionError("line N: ...")`."""
    samples: list[Sample] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        try:
            samples.append(_strict_line(line))
        except ExpositionError as exc:
            raise ExpositionError(f"line {lineno}: {exc}") from None
    return samples
