"""The recomputed summary against the tool's own: where the definitions coincide the numbers
must agree within rounding; where they do not, the difference is named, not hidden.

Rounding: the store keeps integer nanoseconds, and infbench's ITL percentiles come from a
histogram at 1 us resolution (`loadgen.summary`), so a latency agrees when it is within
2 us (0.002 ms) or one part in a million; counts must be equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from infbench.imports.model import ImportedRun

ABS_MS = 0.002
REL = 1e-6


def agrees(tool_value: float, ours: float, infbench_key: str) -> bool:
    if not infbench_key.endswith("_ms"):
        # Counts: exact, but a tool may have summed them as floats (1968.9999999999998).
        return abs(tool_value - ours) <= 1e-6 * max(1.0, abs(tool_value))
    return abs(tool_value - ours) <= max(ABS_MS, REL * abs(tool_value))


def compare(run: ImportedRun, summary: dict[str, Any],
            pairs: Callable[[dict[str, Any]], dict[str, str]],
            differences: dict[str, str]) -> list[dict[str, Any]]:
    """One entry per number the tool reported that infbench recomputes: `tool_key`,
    `infbench_key`, both values, and `agrees` (True/False), or `differs` with the reason
    where the definitions differ (`differences`: tool key -> why)."""
    out = []
    for tool_key, ours_key in pairs(run.tool_summary).items():
        theirs, ours = run.tool_summary.get(tool_key), summary.get(ours_key)
        entry: dict[str, Any] = {"tool_key": tool_key, "infbench_key": ours_key,
                                 "tool": theirs, "infbench": ours}
        if not isinstance(theirs, int | float) or not isinstance(ours, int | float) \
                or not math.isfinite(float(theirs)) or not math.isfinite(float(ours)):
            entry["agrees"] = None
        else:
            entry["agrees"] = agrees(float(theirs), float(ours), ours_key)
        out.append(entry)
    for tool_key, why in differences.items():
        if tool_key in run.tool_summary:
            out.append({"tool_key": tool_key, "infbench_key": None, "tool": run.tool_summary[tool_key],
                        "infbench": None, "agrees": None, "differs": why})
    return out


def disagreements(check: list[dict[str, Any]]) -> list[str]:
    """One line per number whose definitions coincide but whose values do not."""
    return [f"{c['tool_key']}: the tool says {c['tool']}, recomputed {c['infbench']} ({c['infbench_key']})"
            for c in check if c.get("agrees") is False]


def report_lines(summary: dict[str, Any]) -> list[str]:
    """What `infbench import --from` says about one stored run: the notes (what the file
    lacks), how the recomputed summary compares with the tool's, and any disagreement."""
    imported = summary.get("imported") or {}
    check = imported.get("check") or []
    lines = [f"note: {n}" for n in imported.get("notes") or []]
    agree = [c["tool_key"] for c in check if c.get("agrees") is True]
    differs = [c["tool_key"] for c in check if c.get("differs")]
    lines.append(f"summary check: {len(agree)} of the tool's numbers recomputed and equal within "
                 f"rounding" + (f"; defined differently, not compared: {', '.join(differs)}"
                                if differs else ""))
    lines += [f"warning: {d}" for d in disagreements(check)]
    return lines
