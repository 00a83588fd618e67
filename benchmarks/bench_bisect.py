"""Probe runs `infbench config bisect` needs against the number of differing settings:
`python benchmarks/bench_bisect.py [--engine]`. Writes benchmarks/results/bisect.md.

Part 1 drives the same delta debugging (`infbench.config.bisect.ddmin`) with an oracle for
every position of one culprit, and for every (or 300 sampled) pairs that fail only together,
at n = 2..32 settings; it also runs it with probes that come back unresolved at random
(the gate could not tell), which ddmin treats as not reproducing. Part 2 (`--engine`)
bisects a real regression on the reference engine (L4 sim, 8 differing settings, one
culprit) and records the runs it used, the budget it announced and the wall time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine_info import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infbench.config.bisect import budget, ddmin  # noqa: E402
from infbench.gate import FAIL, PASS  # noqa: E402

SIZES = (2, 4, 6, 8, 12, 16, 24, 32)


def probes(keys: list[str], culprits: set[str], unresolved: float = 0.0,
           rng: random.Random | None = None) -> tuple[int, list[str]]:
    seen: dict[frozenset[str], str] = {}

    def test(subset: list[str]) -> str:
        key = frozenset(subset)
        if key not in seen:  # the bisection caches every probe's verdict
            fails = culprits <= key
            # A real regression the gate could not tell from noise: ddmin reads it as a pass.
            missed = rng is not None and fails and len(key) < len(keys) and rng.random() < unresolved
            seen[key] = "unresolved" if missed else (FAIL if fails else PASS)
        return seen[key]
    found = ddmin(keys, test)
    return len(seen), found


def oracle_table() -> list[str]:
    rows = ["| n settings | budget (n²+3n) | one culprit: mean / max probes | pair: mean / max probes | "
            "pair, 20% of failing probes unresolved: mean / max, exact pair found |",
            "| --- | --- | --- | --- | --- |"]
    rng = random.Random(0)
    for n in SIZES:
        keys = [f"k{i}" for i in range(n)]
        single = [probes(keys, {k})[0] for k in keys]
        pairs = list(itertools.combinations(keys, 2))
        if len(pairs) > 300:
            pairs = rng.sample(pairs, 300)
        pair = [probes(keys, set(p))[0] for p in pairs] if n >= 2 else []
        noisy = [probes(keys, set(p), 0.2, rng) for p in pairs]
        ok = sum(sorted(f) == sorted(p) for (_, f), p in zip(noisy, pairs, strict=True))
        rows.append(f"| {n} | {budget(n, 0)[0]} | {sum(single) / n:.1f} / {max(single)} | "
                    f"{sum(pair) / len(pair):.1f} / {max(pair)} | "
                    f"{sum(c for c, _ in noisy) / len(noisy):.1f} / {max(c for c, _ in noisy)}, "
                    f"{ok}/{len(pairs)} |")
    return rows


def engine_run() -> list[str]:
    good = {"max_num_seqs": 16, "block_size": 16, "enable_prefix_caching": False, "stream_interval": 1,
            "scheduling_policy": "fcfs", "async_scheduling": False, "max_num_batched_tokens": 2048,
            "gpu_memory_utilization": 0.9}
    bad = {**good, "max_num_seqs": 8, "block_size": 32, "enable_prefix_caching": True,
           "stream_interval": 2, "scheduling_policy": "priority", "async_scheduling": True,
           "max_num_batched_tokens": 4096, "gpu_memory_utilization": 0.85}
    engine = "--gpu L4 --model meta-llama/Llama-3.1-8B --max-model-len 512"
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        db = d / "b.duckdb"
        for name, values in (("good", good), ("bad", bad)):
            (d / f"{name}.toml").write_text("[defaults]\n" + "".join(
                f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
            # The engine's /engine/config document, captured without starting it twice.
            code = ("import sys, json; from reference_engine.config import EngineConfig; "
                    f"c = EngineConfig.with_defaults({str(d / (name + '.toml'))!r}, gpu='L4', "
                    "model='meta-llama/Llama-3.1-8B', max_model_len=512); "
                    "print(json.dumps(c.resolved()))")
            doc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 cwd=ROOT, check=True).stdout
            sys.path.insert(0, str(ROOT))
            from infbench.config.endpoint import from_engine_config
            from infbench.config.store import save_config
            from infbench.store import open_store
            con = open_store(db)
            save_config(con, from_engine_config(json.loads(doc), name), label=name)
            con.close()
        t = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "infbench", "config", "bisect", "--db", str(db),
                            "--good", "good", "--bad", "bad", "--json", "--launch",
                            f"{{python}} -m reference_engine --port {{port}} {engine} "
                            f"--defaults {d / 'good.toml'} {{args}}",
                            "--num-requests", "64", "--concurrency", "16",
                            "--input-tokens", "uniform:32:96", "--output-tokens", "uniform:8:16"],
                           capture_output=True, text=True, cwd=ROOT)
        wall = time.monotonic() - t
    doc = json.loads(r.stdout)
    return ["| differing settings | culprit found | probes | runs used | budget announced (probes / runs) | wall time |",
            "| --- | --- | --- | --- | --- | --- |",
            f"| {len(doc['keys'])} | {', '.join(doc['culprit'])} | {len(doc['steps'])} | {doc['runs_used']} | "
            f"{doc['budget_probes']} / {doc['budget_runs']} | {wall:.0f} s |"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", action="store_true", help="also bisect on the reference engine (minutes)")
    args = ap.parse_args()
    out = ["# `infbench config bisect`: probes needed against differing settings", "",
           f"Machine: {describe()}", "",
           "Delta debugging (ddmin) with an oracle that fails exactly when the culprits are all "
           "applied. Counted: ddmin's distinct probes (the bisection caches verdicts); a real "
           "bisection adds one probe of the whole set and one baseline run of the good "
           "configuration per request count. The last column makes 20% of the probes that "
           "should fail come back unresolved (the gate could not tell): ddmin reads them as not "
           "reproducing, so it may stop at a larger set; a culprit it names is still one that "
           "failed when measured.", "",
           *oracle_table()]
    if args.engine:
        out += ["", "On the reference engine (L4 sim, Llama-3.1-8B, 64 requests per run at "
                "concurrency 16; one run = engine start + `infbench run`):", "", *engine_run()]
    text = "\n".join(out) + "\n"
    (ROOT / "benchmarks" / "results" / "bisect.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
