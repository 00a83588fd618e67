"""The shape every playbook returns: a diagnosis holding findings, each with its evidence.

A finding names a cause (the verdict), says how sure and how bad, shows the numbers that
led there together with the SQL that produced each (rerunnable against the same store),
and says what to do next. Everything here is plain data and round-trips through JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("info", "warning", "critical")
_SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

Number = int | float | str | bool | None


@dataclass
class Evidence:
    """One measured fact: a name, its values, and the SQL that produced them (None when the
    number was derived in Python from other evidence; `note` then says how)."""

    name: str
    values: Mapping[str, Number]  # read only: a playbook's dict of any narrower values
    sql: str | None = None
    note: str | None = None


@dataclass
class Finding:
    verdict: str          # stable machine id of the named cause, e.g. "engine_wide_stall"
    title: str            # the cause in words
    confidence: float     # 0..1: how sure the playbook is that the verdict is the cause
    severity: str         # info | warning | critical
    summary: str          # one or two sentences an SRE reads first
    evidence: list[Evidence] = field(default_factory=list)
    next_actions: list[str] = field(default_factory=list)
    # What of the run the cause touched, for measuring its damage and joining it with other
    # playbooks' findings by time: `windows_s` ([start, end] s from the run's start), a
    # `replica` name, `requests` (request_idx). Empty: the whole run.
    scope: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity: {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence: {self.confidence} is not in [0, 1]")

    @property
    def confidence_label(self) -> str:
        return "high" if self.confidence >= 0.8 else "medium" if self.confidence >= 0.5 else "low"


@dataclass
class Diagnosis:
    playbook: str
    run_id: str
    data_sources: dict[str, bool]          # which inputs existed: client_timeline, engine_steps...
    findings: list[Finding] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)   # baseline numbers shown with any result
    notes: list[str] = field(default_factory=list)           # caveats about the data itself

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (-_SEVERITY_RANK[f.severity], -f.confidence))

    def verdicts(self) -> list[str]:
        return [f.verdict for f in self.sorted_findings()]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["findings"] = [
            {**asdict(f), "confidence_label": f.confidence_label} for f in self.sorted_findings()
        ]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        findings = []
        for f in data.get("findings", []):
            f = {k: v for k, v in f.items() if k != "confidence_label"}
            f["evidence"] = [Evidence(**e) for e in f.get("evidence", [])]
            findings.append(Finding(**f))
        return cls(playbook=data["playbook"], run_id=data["run_id"],
                   data_sources=dict(data["data_sources"]), findings=findings,
                   context=dict(data.get("context", {})), notes=list(data.get("notes", [])))
