"""Per-GPU summary of sampled rows (what `infbench probe gpu` prints): pure, no I/O."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any


def _vals(rows: list[Mapping[str, Any]], col: str) -> list[float]:
    return [float(r[col]) for r in rows if r.get(col) is not None]


def _median(v: list[float]) -> float | None:
    if not v:
        return None
    s = sorted(v)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def summarize_gpus(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One dict per (instance, gpu): the ranges of every field over the samples, the clock
    event reasons seen with the share of samples each was set in, and why fields were NULL."""
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        key = (str(r.get("instance") or ""), int(r["gpu"]) if r.get("gpu") is not None else -1)
        groups.setdefault(key, []).append(r)
    out = []
    for (instance, gpu), rs in sorted(groups.items()):
        n = len(rs)
        reasons: Counter[str] = Counter()
        missing: dict[str, str] = {}
        for r in rs:
            for name in filter(None, (r.get("clock_event_names") or "").split(",")):
                reasons[name] += 1
            if r.get("unavailable"):
                missing.update(json.loads(r["unavailable"]))
        sm, pw, temp = _vals(rs, "sm_clock_mhz"), _vals(rs, "power_w"), _vals(rs, "temperature_c")
        last = rs[-1]
        out.append({
            "instance": instance, "gpu": gpu, "uuid": last.get("uuid"),
            "model_name": last.get("model_name"), "samples": n,
            "sm_clock_mhz": {"min": min(sm, default=None), "median": _median(sm),
                             "max": max(sm, default=None)},
            "sm_clock_max_mhz": last.get("sm_clock_max_mhz"),
            "clock_event_reasons": {k: round(v / n, 3) for k, v in sorted(reasons.items())},
            "power_w": {"mean": sum(pw) / len(pw) if pw else None, "max": max(pw, default=None)},
            "power_limit_w": last.get("power_limit_w"),
            "temperature_c_max": max(temp, default=None),
            "util_gpu_pct_mean": (sum(u := _vals(rs, "util_gpu_pct")) / len(u)) if _vals(rs, "util_gpu_pct") else None,
            "mem_used_bytes_max": max(_vals(rs, "mem_used_bytes"), default=None),
            "mem_total_bytes": last.get("mem_total_bytes"),
            "pcie": {"gen_min": min(_vals(rs, "pcie_gen"), default=None), "gen_max": last.get("pcie_gen_max"),
                     "width_min": min(_vals(rs, "pcie_width"), default=None),
                     "width_max": last.get("pcie_width_max")},
            "ecc_corrected": max(_vals(rs, "ecc_corrected"), default=None),
            "ecc_uncorrected": max(_vals(rs, "ecc_uncorrected"), default=None),
            "xid": last.get("xid"),
            "nvlink": {"active_min": min(_vals(rs, "nvlink_active"), default=None),
                       "links": last.get("nvlink_links")},
            "unavailable": missing,
        })
    return out
