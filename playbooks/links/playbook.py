"""Playbook `links`: the verdicts of the link probes linked to a run, as findings.

A link probe measures the ranks' links on the run's hosts (collectives, then the slow-rank
bisection and the pair matrix, each a statistical verdict with the SQL that recomputes it
from the stored rows: probes/links). A slow rank or pair there is a cause that lasts: a
link does not slow down for some seconds only, so the finding covers the whole run and the
triage joins it with the pauses or slowdown its clients saw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb

from infbench.store import get_run
from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.sql import fetch

PROBES_SQL = """
SELECT probe_id, created_at, source, backend, world_size, hostname, config, verdict
FROM link_probes WHERE run_id = $run_id ORDER BY created_at DESC, probe_id DESC
"""


@dataclass
class LinksOptions:
    def validate(self) -> None:
        return None


def _finding(probe_id: str, world: int | None, cfg: dict[str, Any], v: dict[str, Any],
             probes_sql: str) -> Finding | None:
    bisect, pairs = v.get("bisect") or {}, v.get("pairwise") or {}
    rank = bisect.get("rank") if bisect.get("status") == "slow_rank" else None
    if rank is None and pairs.get("status") == "slow_rank":
        rank = pairs.get("rank")
    slow_pairs = (pairs.get("slow_pairs") or []) if pairs.get("status") in ("slow_pairs", "slow_rank") else []
    if rank is None and not slow_pairs:
        return None
    sql = v.get("sql") or {}
    evidence = []
    if bisect:
        steps = bisect.get("steps") or []
        ratio = max((float(s.get("ratio") or 0.0) for s in steps), default=0.0)
        evidence.append(Evidence("slow_rank_bisection", {
            "status": bisect.get("status"), "rank": bisect.get("rank"), "steps": len(steps),
            "largest_ratio": round(ratio, 3) if ratio else None,
            "message": bisect.get("message")}, sql.get("bisect"),
            "halves of the ranks compared on the same collective, repeat by repeat"))
    if pairs:
        evidence.append(Evidence("pair_matrix", {
            "status": pairs.get("status"), "rank": pairs.get("rank"),
            "slow_pairs": ",".join("-".join(map(str, p)) for p in slow_pairs) or None,
            "message": pairs.get("message")}, sql.get("pairwise"),
            "point-to-point time of every pair against the others"))
    evidence.append(Evidence("probe", {"probe_id": probe_id, "world_size": world,
                                       "injected": cfg.get("inject")}, probes_sql))
    who = f"rank {rank}" if rank is not None else "pairs " + ", ".join(
        "(" + ",".join(map(str, p)) + ")" for p in slow_pairs)
    injected = (f" (injected for this probe: {cfg['inject']})" if cfg.get("inject") else "")
    summary = (f"The link probe {probe_id} on this run's hosts found {who} slow{injected}: "
               + "; ".join(str(m) for m in (bisect.get("message"), pairs.get("message")) if m)
               + ". Every collective that crosses it waits for it, so every step of a "
               "tensor-parallel engine there is longer: the run's slowdown and pauses follow.")
    return Finding(
        "slow_link", f"Slow link: {who}", 0.85, "warning", summary, evidence,
        [f"check {who}'s links: `nvidia-smi topo -m`, NVLink/PCIe errors (`nvidia-smi nvlink "
         "-e`), the NIC and its switch port; move the engine off it and run again",
         "nccl-tests (all_reduce_perf) between the suspect ranks and the others, imported with "
         "`infbench probe import-nccl-tests --run RUN`, confirms it with NCCL's own numbers"],
        scope={"windows_s": [[0.0, None]]})


def diagnose_links(con: duckdb.DuckDBPyConnection, run_ref: str,
                   options: LinksOptions | None = None) -> Diagnosis:
    (options or LinksOptions()).validate()
    run = get_run(con, run_ref)
    sql, rows = fetch(con, PROBES_SQL, run_id=run.run_id)
    if not rows:
        raise ValueError(f"run {run.run_id}: no link probe is linked to it (`infbench probe "
                         "links --run RUN`)")
    diag = Diagnosis("links", run.run_id, {"link_probes": True})
    diag.context = {"probes": [r[0] for r in rows],
                    "no_findings": "No findings: the link probes linked to this run found no "
                                   "slow rank or pair."}
    for probe_id, _, _, _, world, _, cfg, verdict in rows:
        try:
            v, c = json.loads(verdict or "{}"), json.loads(cfg or "{}")
        except json.JSONDecodeError:
            diag.notes.append(f"probe {probe_id}: its stored verdict is not JSON; skipped")
            continue
        f = _finding(probe_id, world, c, v, sql)
        if f is not None:
            diag.findings.append(f)
            break  # the newest probe with a verdict speaks for the hosts now
    return diag
