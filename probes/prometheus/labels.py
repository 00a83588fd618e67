"""Labels as `metric_samples.labels` holds them: `k="v",...` with the text format's escapes.

Prometheus pulls are written sorted by key; the run's own `/metrics` scrapes keep the order the
target printed. `parse_labels` reads both.
"""

from __future__ import annotations

import re

_PAIR = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{escape(v)}"' for k, v in sorted(labels.items()))


def parse_labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _PAIR.match(text, pos)
        if m is None:
            raise ValueError(f"labels: cannot read {text[pos:pos + 40]!r}")
        out[m.group(1)] = re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return out
