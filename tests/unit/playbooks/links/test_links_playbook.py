"""The links playbook (playbooks/links/) on stored probe verdicts: a slow rank or pair is one
finding over the whole run; a probe that found none, or could not tell, is none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infbench.store import create_run
from playbooks.links import diagnose_links
from tests.support.stores import new_store


def _store(tmp_path: Path, verdicts: list[dict[str, Any] | None], inject: str | None = None):
    con = new_store(tmp_path / "l.duckdb")
    create_run(con, run_id="r", config={}, target_url="x", model="m", endpoint="completions",
               t0_monotonic_ns=0)
    for i, v in enumerate(verdicts):
        con.execute("INSERT INTO link_probes (probe_id, run_id, created_at, source, world_size, "
                    "config, verdict) VALUES (?, 'r', now() + to_seconds(?), 'probe', 4, ?, ?)",
                    [f"lp{i}", i, json.dumps({"inject": inject} if inject else {}),
                     json.dumps(v) if v is not None else None])
    return con


def _bisect(status: str, rank: int | None) -> dict[str, Any]:
    return {"bisect": {"status": status, "rank": rank, "message": f"{status} {rank}",
                       "steps": [{"ratio": 2.4}, {"ratio": 2.9}]},
            "sql": {"bisect": "SELECT 1", "pairwise": "SELECT 2"}}


@pytest.mark.parametrize(("rank", "inject"), [(2, None), (0, "slow-link:rank=0,factor=2")])
def test_a_slow_rank_is_a_finding_over_the_whole_run(tmp_path: Path, rank: int, inject: str | None) -> None:
    d = diagnose_links(_store(tmp_path, [_bisect("slow_rank", rank)], inject), "r")
    (f,) = d.findings
    assert f.verdict == "slow_link" and f.title == f"Slow link: rank {rank}"
    assert f.scope == {"windows_s": [[0.0, None]]}
    assert ("injected" in f.summary) == (inject is not None)
    ev = {e.name: e for e in f.evidence}
    assert ev["slow_rank_bisection"].values["largest_ratio"] == 2.9 and ev["slow_rank_bisection"].sql == "SELECT 1"


def test_slow_pairs_without_one_rank_name_the_pairs(tmp_path: Path) -> None:
    v = {"pairwise": {"status": "slow_pairs", "rank": None, "slow_pairs": [[0, 3], [1, 3]],
                      "message": "pairs (0,3) (1,3)"}, "sql": {"pairwise": "SELECT 2"}}
    (f,) = diagnose_links(_store(tmp_path, [v]), "r").findings
    assert f.title == "Slow link: pairs (0,3), (1,3)"


@pytest.mark.parametrize("status", ["no_slow_rank", "cannot_tell", "not_single_rank"])
def test_no_slow_rank_or_no_verdict_is_no_finding(tmp_path: Path, status: str) -> None:
    assert diagnose_links(_store(tmp_path, [_bisect(status, None), None]), "r").findings == []


def test_the_newest_probe_speaks_for_the_hosts(tmp_path: Path) -> None:
    d = diagnose_links(_store(tmp_path, [_bisect("slow_rank", 1), _bisect("slow_rank", 3)]), "r")
    assert [f.title for f in d.findings] == ["Slow link: rank 3"]


def test_no_probe_linked_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no link probe is linked"):
        diagnose_links(_store(tmp_path, []), "r")
