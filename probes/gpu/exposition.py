"""Parse Prometheus text exposition format (what `/metrics` answers) into samples.

Only what GPU telemetry needs: every sample line as (name, labels, value); `# HELP` /
`# TYPE` comments and blank lines are skipped. Label values may hold escaped quotes,
backslashes and newlines, and commas or braces inside quotes; values may be NaN or ±Inf;
an optional trailing timestamp (ms) is ignored (the caller stamps the scrape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


class ExpositionError(ValueError):
    """A line that is not valid exposition text."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    raw: str  # the value as written: DCGM's blank sentinels are exact only as integers


_ESC = {"\\": "\\", '"': '"', "n": "\n"}


def _labels(line: str, i: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse `{k="v",...}` starting at line[i] == '{'; returns labels and the index after '}'."""
    labels: dict[str, str] = {}
    i += 1
    n = len(line)
    while True:
        while i < n and line[i] in " \t,":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        j = i
        while j < n and (line[j].isalnum() or line[j] == "_"):
            j += 1
        key = line[i:j]
        if not key or j >= n or line[j] != "=" or j + 1 >= n or line[j + 1] != '"':
            raise ExpositionError(f"line {lineno}: bad label at column {i + 1}")
        i = j + 2
        out = []
        while True:
            if i >= n:
                raise ExpositionError(f"line {lineno}: unterminated label value")
            c = line[i]
            if c == "\\" and i + 1 < n:
                out.append(_ESC.get(line[i + 1], "\\" + line[i + 1]))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                out.append(c)
                i += 1
        labels[key] = "".join(out)


def _value(text: str, lineno: int) -> float:
    t = text.strip()
    low = t.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    try:
        return float(t)
    except ValueError:
        raise ExpositionError(f"line {lineno}: bad value {t!r}") from None


def parse_exposition(text: str) -> list[Sample]:
    samples: list[Sample] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        i = 0
        n = len(line)
        while i < n and (line[i].isalnum() or line[i] in "_:"):
            i += 1
        name = line[:i]
        if not name:
            raise ExpositionError(f"line {lineno}: no metric name")
        labels: dict[str, str] = {}
        if i < n and line[i] == "{":
            labels, i = _labels(line, i, lineno)
        rest = line[i:].split()
        if not rest or len(rest) > 2:
            raise ExpositionError(f"line {lineno}: expected a value after {name}")
        samples.append(Sample(name, labels, _value(rest[0], lineno), rest[0]))
    return samples
