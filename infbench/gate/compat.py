"""Whether two runs measured the same thing: same workload, arrivals, endpoint, model and
sampling. The engine under test may differ (that is the point); the load may not."""

from __future__ import annotations

from typing import Any

# Config paths that define the load. Stop conditions (duration, request count) and seeds may
# differ: a short canary against a long baseline is a fair comparison of the same load.
WORKLOAD_KEYS = (
    ("workload",),
    ("arrivals",),
    ("target", "endpoint"),
    ("target", "model"),
    ("sampling", "temperature"),
    ("sampling", "ignore_eos"),
    ("warmup_s",),
)


def _get(cfg: dict[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = cfg
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def _flat(prefix: str, v: Any) -> dict[str, Any]:
    if isinstance(v, dict):
        out: dict[str, Any] = {}
        for k, sub in v.items():
            out.update(_flat(f"{prefix}.{k}", sub))
        return out
    return {prefix: v}


def workload_differences(base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """One line per differing field, e.g. `arrivals.concurrency: 8 -> 16`."""
    diffs = []
    for path in WORKLOAD_KEYS:
        name = ".".join(path)
        a, b = _flat(name, _get(base, path)), _flat(name, _get(cand, path))
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                diffs.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    return diffs
