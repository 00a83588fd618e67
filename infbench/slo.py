"""`--slo ttft=500ms,tpot=50ms,e2el=2s`: latency objectives a request must all meet to count
towards goodput."""

from __future__ import annotations

import re

SLO_METRICS = ("ttft", "tpot", "e2el")
_UNITS = {"ms": 1.0, "s": 1000.0, "us": 0.001}
_VALUE = re.compile(r"^([0-9]*\.?[0-9]+)\s*(ms|s|us)?$")


def parse_slo(text: str | None) -> dict[str, float]:
    """Milliseconds per metric; a bare number means milliseconds."""
    out: dict[str, float] = {}
    if not text:
        return out
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip().lower()
        if key == "e2e":
            key = "e2el"
        if not sep or key not in SLO_METRICS:
            raise ValueError(f"slo: {item.strip()!r} is not METRIC=VALUE with METRIC in {', '.join(SLO_METRICS)}")
        m = _VALUE.match(value.strip().lower())
        if not m:
            raise ValueError(f"slo: {key}={value!r} is not a duration like 500ms or 2s")
        out[key] = float(m.group(1)) * _UNITS[m.group(2) or "ms"]
    return out


# Each objective as a condition on the store's `request_latency` view. TTFT and e2e are taken
# from the intended send, so a client that fell behind its schedule cannot hide a miss.
_SLO_COLUMNS = {"ttft": "ttft_intended_ms", "tpot": "coalesce(tpot_ms, 0)", "e2el": "e2e_intended_ms"}


def slo_condition_sql(slo: dict[str, float]) -> str:
    """A SQL condition over `request_latency` that a request meeting every objective satisfies."""
    if not slo:
        raise ValueError("slo: no objectives given")
    return " AND ".join(f"{_SLO_COLUMNS[k]} <= {float(v)!r}" for k, v in slo.items())
