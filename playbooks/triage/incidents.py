"""Findings of different playbooks that are one incident, joined by when they happened.

Two findings from different playbooks join when their time windows overlap by at least half
of the shorter one's span (an open window runs to the run's end), or when both name the same
replica: the join is by time and place, never by verdict name, so a GPU throttle and an
engine-wide pause at the same seconds meet whatever they are called. An incident keeps every
member with its own evidence. Where its members give different causes with high confidence
that cannot both hold (stuck for good against paused and resumed), the incident says so
(`contradiction`) and keeps both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JOIN_OVERLAP = 0.5  # of the shorter finding's windowed time
# Causes that cannot both hold for the same seconds: an engine stuck for good against one that
# paused and went on. Causes that can (a GPU throttle and the pauses it made) only join.
STUCK = {"engine_stopped", "collective_mismatch", "rank_outside_collective"}
RESUMED = {"engine_wide_stall", "periodic_engine_stall"}


@dataclass
class Ranked:
    playbook: str
    verdict: str
    severity: str
    confidence: float
    scope: dict[str, Any]
    damage: dict[str, Any] | None
    index: int  # position in the ranked list
    incident: int | None = None


@dataclass
class Incident:
    members: list[int]  # ranked indices, best first
    windows_s: list[list[float]] = field(default_factory=list)
    replica: str | None = None
    contradiction: str | None = None


def _spans(scope: dict[str, Any], end_s: float) -> list[tuple[float, float]]:
    return [(float(lo), float(end_s if hi is None else hi)) for lo, hi in scope.get("windows_s") or []]


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, hi - lo) for lo, hi in spans)


def overlap(a: dict[str, Any], b: dict[str, Any], end_s: float) -> float:
    """The windowed time two scopes share, over the shorter one's (0 when either has none)."""
    sa, sb = _spans(a, end_s), _spans(b, end_s)
    if not sa or not sb:
        return 0.0
    common = sum(max(0.0, min(h1, h2) - max(l1, l2)) for l1, h1 in sa for l2, h2 in sb)
    shorter = min(_length(sa), _length(sb))
    if shorter <= 0.0:  # instants: they join when one falls inside the other
        return 1.0 if any(l1 <= h2 and l2 <= h1 for l1, h1 in sa for l2, h2 in sb) else 0.0
    return min(1.0, common / shorter)


def _joins(a: Ranked, b: Ranked, end_s: float) -> bool:
    if a.playbook == b.playbook:
        return False  # one playbook's findings are distinct causes by construction
    if a.scope.get("replica") and a.scope.get("replica") == b.scope.get("replica"):
        return True
    return overlap(a.scope, b.scope, end_s) >= JOIN_OVERLAP


def _contradiction(members: list[Ranked]) -> str | None:
    stuck = [m for m in members if m.verdict in STUCK]
    resumed = [m for m in members if m.verdict in RESUMED]
    if not stuck or not resumed:
        return None
    a, b = stuck[0], resumed[0]
    return (f"{a.playbook} says the engine was stuck ({a.verdict}) where {b.playbook} saw it pause and "
            f"go on ({b.verdict}): both are kept; the one whose evidence covers the run's end holds")


def join(ranked: list[Ranked], end_s: float) -> list[Incident]:
    """Incidents of two or more findings (union of pairwise joins), in rank order."""
    parent = list(range(len(ranked)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(ranked):
        for j in range(i + 1, len(ranked)):
            if "info" in (a.severity, ranked[j].severity) and a.severity == ranked[j].severity:
                continue  # two side remarks are no incident
            if _joins(a, ranked[j], end_s):
                parent[root(j)] = root(i)
    groups: dict[int, list[int]] = {}
    for i in range(len(ranked)):
        groups.setdefault(root(i), []).append(i)
    out: list[Incident] = []
    for members in sorted((m for m in groups.values() if len(m) > 1), key=min):
        inc = Incident(members)
        spans = sorted(s for i in members for s in _spans(ranked[i].scope, end_s))
        inc.windows_s = [[round(lo, 3), round(hi, 3)] for lo, hi in spans]
        inc.replica = next((ranked[i].scope["replica"] for i in members if ranked[i].scope.get("replica")), None)
        inc.contradiction = _contradiction([ranked[i] for i in members])
        for i in members:
            ranked[i].incident = len(out)
        out.append(inc)
    return out
