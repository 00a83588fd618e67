"""A replay run: requests given row by row (`loadgen.workloads.replay`), recorded like any run.

`infbench diagnose dilution` plans its re-runs as plain data (`playbooks.dilution.plan`: a
recipe per re-run, the rows mixed from a benchmark and a production run property by
property); this turns one recipe into a measured, stored run against the target. The recipe's
keys: `model` and `endpoint` (the benchmark's), `rows` (input_tokens, output_tokens, shared_tokens, schema, at), `arrivals` ({"kind":
"closed", "concurrency": C} or {"kind": "trace"}: each row's `at`), `temperature`,
`structured_workload` (the structured source run's workload description, for its schemas;
None: the fixed schemas), `num_requests`, `duration_s`, `seed` and `tags` (kept in the run's
configuration, where the analysis finds its re-runs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.preflight import Target
from infbench.loadgen.seeds import new_salt
from infbench.loadgen.workloads import Workload
from infbench.loadgen.workloads.lengths import LengthDist
from infbench.loadgen.workloads.replay import Replay, ReplayRow
from infbench.loadgen.workloads.schemas import SchemaMix
from infbench.pipeline.record import run_and_record
from infbench.pipeline.request import LoadSpec, RunRequest, TargetSpec, TelemetrySpec, WorkloadSpec

Warn = Callable[[str], None]


def schema_table(workload: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """label -> schema of a structured run as its configuration describes it: generated
    schemas (`--schemas K`) are rebuilt, new ones with a fresh salt so they are new to this
    run too; None for the fixed schemas (the replay's default)."""
    mix = (workload or {}).get("schemas")
    if not isinstance(mix, dict):
        return None
    rebuilt = SchemaMix(int(mix["count"]), LengthDist.parse(str(mix["fields"]), "schema_fields"),
                        float(mix.get("new_share", 1.0)))
    return dict(rebuilt.schemas(new_salt()))


@dataclass(frozen=True)
class ReplaySpec(WorkloadSpec):
    """The run pipeline's workload request for a replay: the rows instead of distributions."""

    rows: tuple[ReplayRow, ...] = ()
    schema_by_label: dict[str, dict[str, Any]] | None = None
    description: dict[str, Any] = field(default_factory=dict)

    def build(self, target: Target) -> Workload:
        return Replay(self.rows, target.tokens, self.schema_by_label, self.description)


def replay_request(db: Path, url: str, recipe: dict[str, Any], api_key: str | None = None) -> RunRequest:
    """The run request for one recipe against `url` (the recipe's model and endpoint);
    ValueError (one line) for a recipe that cannot run."""
    target = TargetSpec(url, recipe.get("model"), str(recipe.get("endpoint") or "completions"),
                        api_key=api_key)
    rows = tuple(ReplayRow(int(r["input_tokens"]), int(r["output_tokens"]),
                           int(r.get("shared_tokens") or 0), r.get("schema"),
                           None if r.get("at") is None else float(r["at"]))
                 for r in recipe["rows"])
    a = recipe["arrivals"]
    arrivals = Arrivals(str(a["kind"]), concurrency=int(a.get("concurrency") or 0))
    spec = ReplaySpec("replay", LengthDist("fixed", 1), rows=rows,
                      schema_by_label=schema_table(recipe.get("structured_workload")),
                      description={"recipe": recipe.get("name"),
                                   "swapped": list(recipe.get("swapped") or [])})
    load = LoadSpec(float(recipe["duration_s"]), num_requests=len(rows),
                    seed=int(recipe.get("seed") or 0), temperature=float(recipe.get("temperature") or 0.0))
    # No live watch: a re-run measures a load, it is not an incident to capture.
    return RunRequest(db, target, spec, arrivals, load, TelemetrySpec(watch=None),
                      tags=dict(recipe.get("tags") or {}))


def run_replay(db: Path, url: str, recipe: dict[str, Any], warn: Warn, api_key: str | None = None) -> str:
    """Send the recipe's rows to `url` and store the run; its run id. PreflightError or
    ValueError when the target cannot be used."""
    return run_and_record(replay_request(db, url, recipe, api_key), url, warn).run_id


def replay_runner(db: Path | str, url: str, *, api_key: str | None = None,
                  warn: Warn | None = None) -> Callable[[dict[str, Any]], str]:
    """A runner for `playbooks.dilution`: each recipe run against `url`, stored in `db`."""
    def run(recipe: dict[str, Any]) -> str:
        return run_replay(Path(db), url, recipe, warn or (lambda line: None), api_key)
    return run
