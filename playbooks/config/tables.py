"""The kernel tuning tables the linked configuration's log said were missing (or replaced by
another tuned table) for its device: `playbooks.tuning_tables` judges them, as the start-up
playbook does for a log it imported. A capture keeps the table file names, not the lines, so
the findings cite the configuration's SQL and no line numbers."""

from __future__ import annotations

from infbench.specs.tuning import TuningLine, parse_table_file
from playbooks.config.settings import LinkedConfig
from playbooks.findings import Finding
from playbooks.tuning_tables import Sighting, tuning_findings

_OUTCOMES = {"kernel_tables_missing": "missing", "kernel_tables_other_triton": "fallback",
             "kernel_tables_found": "found"}


def tuning_table_findings(cfg: LinkedConfig) -> list[Finding]:
    """A finding per device and kernel that ran an untuned default (warning where some device
    has the table in the engine's release, information where none has)."""
    engine = cfg.engine if cfg.engine in ("vllm", "sglang") else None
    sightings: list[Sighting] = []
    for key, outcome in _OUTCOMES.items():
        names = cfg.get(key)
        if not isinstance(names, list):
            continue
        for name in names:
            table = parse_table_file(str(name))
            if table is not None:
                sightings.append(Sighting(TuningLine(outcome, table, str(name), engine), None,
                                          None))
    return tuning_findings(sightings, engine, cfg.sql, where="capture")
