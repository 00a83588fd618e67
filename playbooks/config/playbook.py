"""Playbook `config`: the configuration linked to a run (captured by `infbench run` from the
target, or `infbench config capture --run`) against what the run asked of it.

Order: the linked configuration (none: nothing to check, said) -> the batch cap the load ran
into (max_num_seqs with a full batch and requests waiting) -> requests over max_model_len ->
prefix caching off under a shared-prefix workload -> a prefill budget below the prompts ->
kernel tuning tables the engine's log said it had none of for its device.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from infbench.store import get_run
from playbooks.config.checks import (
    batch_cap_finding,
    max_model_len_finding,
    prefill_budget_finding,
    prefix_caching_finding,
)
from playbooks.config.settings import linked_config, run_load
from playbooks.config.tables import tuning_table_findings
from playbooks.findings import Diagnosis


@dataclass
class ConfigOptions:
    def validate(self) -> None:
        return None


def diagnose_config(con: duckdb.DuckDBPyConnection, run_ref: str,
                    options: ConfigOptions | None = None) -> Diagnosis:
    (options or ConfigOptions()).validate()
    run = get_run(con, run_ref)
    cfg = linked_config(con, run.run_id)
    diag = Diagnosis("config", run.run_id, {"config": cfg is not None})
    if cfg is None:
        raise ValueError(f"run {run.run_id}: no configuration is linked to it (`infbench config "
                         "capture --run RUN` links one; `infbench run` links the target's own)")
    load = run_load(con, run.run_id, cfg)
    diag.context = {"config_id": cfg.config_id, "engine": cfg.engine, "version": cfg.version,
                    "source_kind": cfg.source_kind, "load": load.facts,
                    "no_findings": "No findings: no setting of the linked configuration bound "
                                   "this run's load."}
    for check in (batch_cap_finding, max_model_len_finding, prefix_caching_finding,
                  prefill_budget_finding):
        f = check(cfg, load)
        if f is not None:
            diag.findings.append(f)
    diag.findings += tuning_table_findings(cfg)
    return diag
