"""The sim against published measurements: the table (published_sweeps.toml) and its replay.

`compare()` replays every row of every published sweep through the sim engine on a virtual
clock (reference_engine/closed_loop.py) and returns, per row and metric, the published
figure, the sim's, and the relative error. The unit test requires every error within 15%;
docs/sim_calibration.md explains the table, the model behind the sim's figures, and where
it is still short.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference_engine.closed_loop import ClosedLoopResult, run_closed_loop
from reference_engine.config import EngineConfig
from reference_engine.sim_executor import SimExecutor

TABLE = Path(__file__).with_name("published_sweeps.toml")
PROMPTS_PER_CONCURRENCY = 4  # where a source does not publish its request count
MIN_PROMPTS = 8


@dataclass(frozen=True)
class Comparison:
    sweep: str
    concurrency: int
    metric: str          # "tpot_ms" | "output_throughput" | "throughput_ratio"
    published: float
    sim: float

    @property
    def error(self) -> float:
        return self.sim / self.published - 1.0


def load_sweeps(path: Path = TABLE) -> list[dict[str, Any]]:
    with path.open("rb") as f:
        return tomllib.load(f)["sweep"]


def engine_config(sweep: dict[str, Any]) -> EngineConfig:
    return EngineConfig.with_defaults(
        sweep["defaults"], model=sweep["model"], gpu=sweep["gpu"],
        tensor_parallel_size=sweep["tensor_parallel_size"], dtype=sweep["dtype"],
        # Room for the longest request; random prompts share nothing, so no prefix cache.
        max_model_len=sweep["input_len"] + sweep["output_len"], enable_prefix_caching=False)


def replay(sweep: dict[str, Any], prefill_factor: float = 1.0) -> dict[int, ClosedLoopResult]:
    """The sweep's closed loops; `prefill_factor` != 1 misprices prefill (the test's check
    that the table can tell)."""
    config = engine_config(sweep)
    per = sweep.get("num_prompts_per_concurrency", PROMPTS_PER_CONCURRENCY)
    levels = sorted({r["concurrency"] for r in sweep["row"]}
                    | {r["throughput_ratio_to"] for r in sweep["row"] if "throughput_ratio_to" in r})

    def prompts(c: int) -> int:
        if "num_prompts" in sweep:  # the same count at every concurrency, as the source sent
            return int(sweep["num_prompts"])
        return max(c * per, MIN_PROMPTS if per == PROMPTS_PER_CONCURRENCY else 1)

    return {c: run_closed_loop(config, sweep["input_len"], sweep["output_len"], c, prompts(c),
                               executor=SimExecutor(config, prefill_factor=prefill_factor))
            for c in levels}


def compare(sweep: dict[str, Any], prefill_factor: float = 1.0) -> list[Comparison]:
    sim = replay(sweep, prefill_factor)
    mean = sweep["tpot_stat"] == "mean"
    out: list[Comparison] = []
    for row in sweep["row"]:
        c, got = row["concurrency"], sim[row["concurrency"]]
        if "tpot_ms" in row:
            out.append(Comparison(sweep["name"], c, "tpot_ms", row["tpot_ms"],
                                  got.mean_tpot_ms if mean else got.median_tpot_ms))
        if "output_throughput" in row:
            out.append(Comparison(sweep["name"], c, "output_throughput",
                                  row["output_throughput"], got.output_throughput))
        if "throughput_ratio" in row:
            base = sim[row["throughput_ratio_to"]].output_throughput
            out.append(Comparison(sweep["name"], c, "throughput_ratio", row["throughput_ratio"],
                                  got.output_throughput / base))
    return out


def coverage(sweeps: list[dict[str, Any]]) -> dict[tuple[str, str], list[int]]:
    """Per (model, GPU), the concurrencies at which some published figure is checked."""
    checked = {"tpot_ms", "output_throughput", "throughput_ratio"}
    out: dict[tuple[str, str], set[int]] = {}
    for s in sweeps:
        levels = out.setdefault((s["model"], s["gpu"]), set())
        levels.update(r["concurrency"] for r in s["row"] if checked & r.keys())
    return {k: sorted(v) for k, v in out.items()}
