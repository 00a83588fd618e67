"""What a playbook knows about a run before it looks at latencies: which data exist, and the
engine setup (model, GPU, token budget) recorded with the run or given by the user."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb

from infbench.store import get_run
from playbooks.sql import fetch_one

_INVENTORY_SQL = """
SELECT (SELECT count(*) FROM chunks WHERE run_id = $run_id AND content) AS content_chunks,
       (SELECT count(*) FROM requests WHERE run_id = $run_id) AS requests,
       (SELECT count(*) FROM engine_steps WHERE run_id = $run_id) AS engine_steps,
       (SELECT count(*) FROM metric_samples WHERE run_id = $run_id) AS metric_samples,
       (SELECT count(*) FROM client_samples WHERE run_id = $run_id) AS client_samples
"""

# Engine flags (vLLM spelling) that carry the setup the roofline needs.
_FLAGS = {
    "--model": "model", "--gpu": "gpu", "--dtype": "dtype", "--kv-cache-dtype": "kv_cache_dtype",
    "--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--step-overhead-ms": "step_overhead_ms",
}


@dataclass
class EngineSetup:
    model: str | None = None
    gpu: str | None = None
    dtype: str = "bf16"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    max_num_batched_tokens: int | None = None
    source: dict[str, str] = field(default_factory=dict)  # setting -> where it came from

    @property
    def kv_format(self) -> str:
        return self.dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype


@dataclass
class RunContext:
    run_id: str
    t0_ns: int
    config: dict[str, Any]
    counts: dict[str, int]
    setup: EngineSetup
    inventory_sql: str

    @property
    def has_steps(self) -> bool:
        return self.counts["engine_steps"] > 0

    @property
    def has_metrics(self) -> bool:
        return self.counts["metric_samples"] > 0

    def data_sources(self) -> dict[str, bool]:
        return {
            "client_timeline": self.counts["content_chunks"] > 0,
            "engine_steps": self.has_steps,
            "server_metrics": self.has_metrics,
            "client_health": self.counts["client_samples"] > 0,
        }


def _from_args(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag in _FLAGS:
            if not eq and i + 1 < len(args):
                value = args[i + 1]
                i += 1
            out[_FLAGS[flag]] = value
        i += 1
    return out


def engine_setup(config: dict[str, Any], run_model: str | None,
                 overrides: dict[str, Any] | None = None) -> EngineSetup:
    """Resolve the engine setup: user overrides, then the engine's own resolved config if the
    run recorded one, then the bundled engine's command line, then the served model name."""
    found: dict[str, tuple[Any, str]] = {}
    target = config.get("target") or {}
    engine_cfg = config.get("engine_config") or {}
    for key, item in engine_cfg.items():
        value = item.get("value") if isinstance(item, dict) else item
        if value is not None:
            found[key] = (value, "engine config")
    for key, value in _from_args(list(target.get("engine_args") or [])).items():
        found.setdefault(key, (value, "engine command line"))
    if run_model and "model" not in found:
        found["model"] = (run_model, "served model name")
    for key, value in (overrides or {}).items():
        if value is not None:
            found[key] = (value, "command-line option")
    setup = EngineSetup()
    for key, (value, src) in found.items():
        if not hasattr(setup, key) or key == "source":
            continue
        try:
            if key in ("tensor_parallel_size", "max_num_batched_tokens"):
                value = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key}: {value!r} from the {src} is not an integer") from None
        setattr(setup, key, value)
        setup.source[key] = src
    return setup


def load_context(con: duckdb.DuckDBPyConnection, run_ref: str,
                 overrides: dict[str, Any] | None = None) -> RunContext:
    run = get_run(con, run_ref)
    sql, row = fetch_one(con, _INVENTORY_SQL, run_id=run.run_id)
    counts = dict(zip(("content_chunks", "requests", "engine_steps", "metric_samples",
                       "client_samples"), (int(v) for v in row), strict=True))
    return RunContext(run_id=run.run_id, t0_ns=int(run.t0_monotonic_ns or 0), config=run.config,
                      counts=counts, setup=engine_setup(run.config, run.model, overrides),
                      inventory_sql=sql)
