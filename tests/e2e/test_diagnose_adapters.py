"""`infbench diagnose adapters` on the bundled engine serving LoRA adapters: tenants each on
their own adapter, the engine at different --max-loras. Serialization is named, with the
setting that fixes it (N = the distinct adapters the run asked for), exactly where the batch
holds fewer adapters than the run asks for; the triage (`infbench diagnose RUN`) runs the
playbook on its own. Loopback only (infbench run starts and stops the engine); each run is a
closed loop of at most 64 requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import infbench

pytestmark = pytest.mark.e2e


def _adapters(root: Path, n: int, rank: int) -> list[str]:
    out = []
    for i in range(n):
        d = root / f"lora-{i}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": 2 * rank}))
        out.append(f"lora-{i}={d}")
    return out


def _run(tmp: Path, adapters: int, max_loras: int, requests: int, conc: int, rank: int = 16) -> Path:
    """One run: `adapters` tenants, tenant i always on lora-i, against the bundled engine."""
    db = tmp / f"a{adapters}-m{max_loras}.duckdb"
    tenants = ",".join(f"t{i}:1" for i in range(adapters))
    mix = ",".join(f"t{i}=lora-{i}" for i in range(adapters))
    engine = ["--enable-lora", f"--max-loras={max_loras}", f"--max-lora-rank={rank}",
              "--lora-modules", *_adapters(tmp / "adapters", adapters, rank)]
    r = infbench("run", "--db", str(db), "--quiet", "--tenants", tenants, "--adapters", mix,
                 "--arrival", "closed", "--concurrency", str(conc), "--num-requests", str(requests),
                 "--input-tokens", "200", "--output-tokens", "32", "--seed", "3",
                 *(f"--engine-arg={a}" for a in engine), timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return db


def _diagnose(db: Path, *verb: str) -> dict:
    r = infbench("diagnose", *verb, "last", "--db", str(db), "--json", timeout=120)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize(("adapters", "max_loras", "requests", "conc", "named"), [
    (8, 1, 64, 16, True),
    (8, 8, 64, 16, False),
    (3, 2, 48, 9, True),
])
def test_serialization_is_named_with_the_fix_only_below_the_adapters_asked_for(
        tmp_path: Path, adapters: int, max_loras: int, requests: int, conc: int, named: bool) -> None:
    db = _run(tmp_path, adapters, max_loras, requests, conc)
    d = _diagnose(db, "adapters")
    verdicts = [f["verdict"] for f in d["findings"]]
    assert d["context"]["max_loras"] == max_loras and d["context"]["adapters"] == adapters
    if not named:
        assert "adapter_serialization" not in verdicts, d
        assert d["context"]["blocked_share"] == 0.0
        return
    assert verdicts[0] == "adapter_serialization", d
    f = d["findings"][0]
    assert f"--max-loras {adapters}" in f["next_actions"][0]
    comp = next(e for e in f["evidence"] if e["name"] == "batch_composition")
    assert comp["values"]["max_adapters_per_step"] == max_loras  # the slot rule held
    assert comp["values"]["steps_with_requests_waiting_for_a_slot"] > 0
    assert "engine_steps" in comp["sql"] and "lora_waiting" in comp["sql"]
    by_adapter = next(e for e in f["evidence"] if e["name"] == "latency_by_adapter")["values"]
    assert {k.split("_")[0] for k in by_adapter} == {f"lora-{i}" for i in range(adapters)}
    if adapters == 8:  # the triage runs the playbook on its own and ranks its finding
        t = _diagnose(db)
        assert "adapters" in t["context"]["playbooks_run"]
        assert t["context"]["headline"]["verdict"] == "adapter_serialization", t["context"]
