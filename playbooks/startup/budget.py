"""A stored start-up log beside the arithmetic: the setup it ran with, the figures it printed
(one per key, the worst rank's), and `infbench plan memory`'s budget for the same setup,
computed by the same function (`infbench.specs.memory.plan_memory`), never re-derived here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import duckdb

from infbench.specs import SpecError, get_gpu, get_model
from infbench.specs.formats import serving_formats
from infbench.specs.gpus import GIB
from infbench.specs.memory import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    MemoryPlan,
    plan_memory,
)
from playbooks.sql import fetch

LOG_SQL = """
SELECT log_id, path, engine, version, log_format, ranks, settings, outcome, failure_kind,
       failure_phase, failure_line, failure_text, run_id, notes
FROM startup_logs
WHERE log_id = $ref OR log_id LIKE $prefix
   OR ($ref = 'last' AND imported_at = (SELECT max(imported_at) FROM startup_logs))
ORDER BY imported_at DESC
"""

# One figure per key over every rank: the engine starts only if every rank fits, so the
# smallest KV figure and the largest of the other terms speak for it.
FIGURES_SQL = """
SELECT key, phase, unit,
       CASE WHEN phase = 'kv_cache' THEN min(value) ELSE max(value) END AS value,
       count(DISTINCT rank) AS ranks, min(line_no) AS first_line
FROM startup_events
WHERE log_id = $log_id AND value IS NOT NULL
GROUP BY key, phase, unit
ORDER BY first_line
"""

PHASES_SQL = """
SELECT phase, min(line_no) AS first_line, max(line_no) AS last_line,
       count(DISTINCT rank) AS ranks, count(*) AS figures
FROM startup_events
WHERE log_id = $log_id AND phase <> 'tuning'
GROUP BY phase
ORDER BY first_line, min(seq)
"""


@dataclass
class StoredLog:
    log_id: str
    path: str
    engine: str
    version: str | None
    log_format: str
    ranks: int
    settings: dict[str, str]
    outcome: str
    failure_kind: str | None
    failure_phase: str | None
    failure_line: int | None
    failure_text: str | None
    run_id: str | None
    notes: list[str]
    sql: str


def load_log(con: duckdb.DuckDBPyConnection, ref: str) -> StoredLog:
    sql, rows = fetch(con, LOG_SQL, ref=ref, prefix=ref + "%")
    if not rows:
        raise ValueError(f"start-up log {ref!r}: not in this store")
    if len(rows) > 1 and rows[0][0] != ref and ref != "last":
        raise ValueError(f"start-up log {ref!r}: the prefix names {len(rows)} logs")
    r = rows[0]
    return StoredLog(r[0], r[1], r[2], r[3], r[4], int(r[5] or 0), json.loads(r[6] or "{}"),
                     r[7], r[8], r[9], r[10], r[11], r[12], json.loads(r[13] or "[]"), sql)


@dataclass
class Setup:
    """The engine settings the arithmetic needs, and where each came from."""

    model: str | None = None
    gpu: str | None = None
    tp: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    enforce_eager: bool = False
    source: dict[str, str] = field(default_factory=dict)


_INT = ("tp", "max_model_len", "block_size", "max_num_seqs", "max_num_batched_tokens")
_NAMES = {"tensor_parallel_size": "tp"}


def resolve_setup(log: StoredLog, figures: dict[str, float], overrides: dict[str, Any]) -> Setup:
    """Command-line options, then what the log printed of its settings, then what its
    figures imply (the failing max_model_len, the concurrency line's length, vLLM's default
    utilization), then vLLM's defaults."""
    setup = Setup()
    found: dict[str, tuple[Any, str]] = {}
    if "max_model_len" in figures:
        found["max_model_len"] = (figures["max_model_len"], "the error line")
    elif "max_concurrency_tokens" in figures:
        found["max_model_len"] = (figures["max_concurrency_tokens"], "the max concurrency line")
    if "gpu_memory_utilization" in figures:
        found["gpu_memory_utilization"] = (figures["gpu_memory_utilization"], "the profiling line")
    quant = log.settings.get("quantization")
    for key, value in log.settings.items():
        name = _NAMES.get(key, key)
        if hasattr(setup, name) and name != "source" and value not in ("None", ""):
            found.setdefault(name, (value, "the log's settings"))
    if quant and quant not in ("None", "none") and "dtype" in found:
        found["dtype"] = (quant, "the log's quantization")
    for key, value in overrides.items():
        if value is not None:
            found[key] = (value, "command-line option")
    for key, (raw, src) in found.items():
        parsed: Any = raw
        try:
            if key in _INT:
                parsed = int(float(raw))
            elif key == "gpu_memory_utilization":
                parsed = float(raw)
            elif key == "enforce_eager":
                parsed = str(raw).lower() in ("true", "1")
        except ValueError:
            raise ValueError(f"{key}: {raw!r} from {src} is not a number") from None
        setattr(setup, key, parsed)
        setup.source[key] = src
    return setup


def figures(con: duckdb.DuckDBPyConnection, log_id: str) -> tuple[str, dict[str, float]]:
    sql, rows = fetch(con, FIGURES_SQL, log_id=log_id)
    return sql, {key: float(value) for key, _, _, value, _, _ in rows}


def logged_terms(f: dict[str, float], block_size: int) -> dict[str, float | None]:
    """The log's figure for each term of the budget (None: it did not print one)."""
    act = f.get("activation_peak_bytes")
    if act is None and "peak_torch_bytes" in f and "weights_bytes" in f:
        act = f["peak_torch_bytes"] - f["weights_bytes"]  # vLLM 0.6.4 printed the peak only
    tokens = f.get("kv_tokens")
    if tokens is None and "num_gpu_blocks" in f:
        tokens = f["num_gpu_blocks"] * block_size
    return {"total": f.get("total_gpu_bytes"), "weights": f.get("weights_bytes"),
            "activation": act, "non_torch": f.get("non_torch_bytes"),
            "cuda_graphs": f.get("graph_estimate_bytes", f.get("graph_bytes")),
            "kv_pool": f.get("available_kv_bytes"), "kv_tokens": tokens}


# Figures printed to 0.01 GiB agree with the arithmetic when within half that.
PRINT_TOLERANCE = 0.006 * GIB


@dataclass
class Budget:
    setup: Setup
    arithmetic: MemoryPlan        # plan memory's budget for the setup (its own estimates)
    as_logged: MemoryPlan         # the same with the terms the engine measured
    logged: dict[str, float | None]
    measured_terms: list[str]     # terms where the log's figure replaced the estimate


def budget(setup: Setup, logged: dict[str, float | None]) -> Budget:
    """Raises SpecError/ValueError when the model or GPU is unknown."""
    if not setup.model or not setup.gpu:
        raise ValueError("the model and the GPU are needed for the arithmetic (pass --model and --gpu)")
    model, gpu = get_model(setup.model), get_gpu(setup.gpu)
    weights, kv = serving_formats(setup.dtype, setup.kv_cache_dtype, model.dtype)
    common: dict[str, Any] = dict(tp=setup.tp, gpu_memory_utilization=setup.gpu_memory_utilization,
                  max_model_len=setup.max_model_len, block_size=setup.block_size,
                  weight_format=weights, kv_format=kv, max_num_seqs=setup.max_num_seqs,
                  max_num_batched_tokens=setup.max_num_batched_tokens,
                  enforce_eager=setup.enforce_eager)
    total = logged.get("total")
    arithmetic = plan_memory(model, gpu, **common,
                             total_memory_bytes=int(total) if total else None)
    overrides: dict[str, Any] = {}
    measured: list[str] = []
    for term, kwarg, planned in (("activation", "activation_bytes", arithmetic.activation_bytes),
                                 ("non_torch", "non_torch_bytes", arithmetic.non_torch_bytes),
                                 ("cuda_graphs", "cuda_graph_bytes", arithmetic.cuda_graph_bytes)):
        value = logged.get(term)
        if value is not None and abs(value - planned) > PRINT_TOLERANCE:
            overrides[kwarg] = value
            measured.append(term)
    as_logged = plan_memory(model, gpu, **common, **overrides,
                            total_memory_bytes=int(total) if total else None) if measured else arithmetic
    return Budget(setup, arithmetic, as_logged, logged, measured)


def graph_fix(b: Budget) -> dict[str, Any] | None:
    """Fewer CUDA-graph sizes (or none): the graph term is what they cost; priced by the same
    arithmetic with that term gone."""
    p = b.as_logged
    if p.fits or p.cuda_graph_bytes <= 0 or b.setup.enforce_eager:
        return None
    s = b.setup
    model, gpu = get_model(s.model or ""), get_gpu(s.gpu or "")
    try:
        eager = plan_memory(model, gpu, tp=p.tp, gpu_memory_utilization=p.gpu_memory_utilization,
                            max_model_len=p.max_model_len, block_size=p.block_size,
                            weight_format=p.weight_format, kv_format=p.kv_format,
                            max_num_seqs=s.max_num_seqs,
                            max_num_batched_tokens=s.max_num_batched_tokens,
                            activation_bytes=p.activation_bytes, non_torch_bytes=p.non_torch_bytes,
                            enforce_eager=True, total_memory_bytes=p.total_bytes,
                            suggest_fixes=False)
    except SpecError:
        return None
    gained = p.cuda_graph_bytes / GIB
    if eager.fits:
        return {"change": "fewer CUDA graph sizes (--cudagraph-capture-sizes) or --enforce-eager",
                "settings": {"enforce_eager": True}, "kv_tokens": eager.kv_tokens, "fits": True,
                "cost": f"frees up to {gained:.2f} GiB/GPU; batches above the largest captured "
                        "size (all, when eager) pay kernel launches every decode step"}
    return {"change": "fewer CUDA graph sizes / --enforce-eager", "settings": {}, "kv_tokens": 0,
            "fits": False, "cost": f"frees at most {gained:.2f} GiB/GPU: not enough on its own"}
