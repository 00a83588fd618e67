"""Playbook `startup`: why an engine did (not) start, from its start-up log beside the
arithmetic. Runbook: playbooks/startup/startup.md.

Order: the phases the log printed, in order -> how it ended (started, failed in which phase,
or the log stops early) -> the same budget from `plan_memory` for the same setup -> which
term differs from the arithmetic -> whether the model ever fit as configured (the arithmetic
with the terms the engine measured) -> the priced fixes -> kernel tuning tables the log says
were missing for its device (`playbooks.tuning_tables`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import duckdb

from infbench.specs import SpecError
from infbench.specs.gpus import GIB
from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.sql import fetch
from playbooks.startup.budget import (
    PHASES_SQL,
    Budget,
    StoredLog,
    budget,
    figures,
    graph_fix,
    load_log,
    logged_terms,
    resolve_setup,
)
from playbooks.startup.outcome import Reading, incomplete_finding, reading, started_finding
from playbooks.startup.tuning import tuning_tables

_TITLES = {
    "kv_cache_too_small": "The KV cache cannot hold one max_model_len sequence: the engine refused to start",
    "no_kv_memory": "Nothing left for KV cache blocks: the engine refused to start",
    "not_enough_memory": "Not enough memory for the KV pool: the engine refused to start",
    "oom": "Out of GPU memory during start-up",
    "cuda_graph_oom": "Out of GPU memory while capturing CUDA graphs",
}
# Terms in vLLM's order, with how a difference reads.
_TERMS = ("weights", "activation", "non_torch", "cuda_graphs", "kv_pool")


@dataclass
class StartupOptions:
    model: str | None = None
    gpu: str | None = None
    tp: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None

    def validate(self) -> None:
        if self.tp is not None and self.tp < 1:
            raise ValueError(f"tp: must be >= 1, got {self.tp}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len: must be >= 1, got {self.max_model_len}")
        u = self.gpu_memory_utilization
        if u is not None and not 0 < u <= 1:
            raise ValueError(f"gpu_memory_utilization: must be in (0, 1], got {u}")


def _gib(x: float | None) -> str:
    return "n/a" if x is None else f"{x / GIB:.2f} GiB"


def diagnose_startup(con: duckdb.DuckDBPyConnection, ref: str,
                     options: StartupOptions | None = None) -> Diagnosis:
    opts = options or StartupOptions()
    opts.validate()
    log = load_log(con, ref)
    diag = Diagnosis("startup", log.run_id or log.log_id,
                     {"startup_log": True, "engine_settings": bool(log.settings)})
    diag.context.update({"log_id": log.log_id, "path": log.path, "engine": log.engine,
                         "version": log.version, "log_format": log.log_format,
                         "outcome": log.outcome, "ranks": log.ranks})
    diag.notes += log.notes
    phases_sql, phase_rows = fetch(con, PHASES_SQL, log_id=log.log_id)
    diag.context["phases"] = [r[0] for r in phase_rows]
    phases_ev = Evidence("phases_in_order", {r[0]: f"lines {r[1]}-{r[2]}, {r[3]} rank(s)"
                                             for r in phase_rows}, phases_sql,
                         "the phases as the log printed them; a phase missing was not reached "
                         "or not logged at this level")
    fig_sql, figs = figures(con, log.log_id)
    overrides = {k: v for k, v in asdict(opts).items() if k != "tp"}
    overrides["tp"] = opts.tp
    setup = resolve_setup(log, figs, overrides)
    logged = logged_terms(figs, setup.block_size)
    diag.context["setup"] = {k: v for k, v in asdict(setup).items()}
    read = reading(log, figs, phase_rows)
    b: Budget | None = None
    if read.cpu:
        diag.notes.append("no arithmetic to compare with: `infbench plan memory` budgets a GPU's "
                          "memory; a CPU server's KV pool is the space it was given "
                          "(VLLM_CPU_KVCACHE_SPACE, or what its node had left)")
    else:
        try:
            b = budget(setup, logged)
        except (SpecError, ValueError) as exc:
            diag.notes.append(f"no arithmetic to compare with: {str(exc).splitlines()[0]}")
    if b is not None:
        diag.context["comparison"] = _comparison(b)
        diag.context["fixes"] = _fixes(b)
        diag.context["fits_as_configured"] = b.as_logged.fits
        diag.context["failing_term"] = b.as_logged.failing_term
    fig_ev = Evidence("logged_vs_arithmetic", _figure_values(logged, b, read.cpu), fig_sql,
                      "log: the worst rank's figure; " + (
                          "no arithmetic for a CPU server" if read.cpu else
                          "arithmetic: `infbench plan memory` for the same setup ("
                          + ", ".join(f"{k} from {v}" for k, v in setup.source.items()) + ")"))
    diag.context["ready_line"] = read.ready_line
    diag.context["not_recognised_from"] = read.not_recognised_from
    if log.outcome == "failed":
        diag.findings.append(_failure_finding(log, b, [phases_ev, fig_ev], read))
    elif log.outcome == "incomplete":
        memory_phases = [p for p in diag.context["phases"] if p != "ready"]
        diag.findings.append(incomplete_finding(read, [phases_ev, fig_ev], _log_evidence(log),
                                                memory_phases[-1] if memory_phases else "first"))
    else:
        diag.findings.append(started_finding(read, b, [phases_ev, fig_ev], _log_evidence(log)))
    differs = _term_finding(b, fig_ev) if b is not None else None
    if differs is not None:
        diag.findings.append(differs)
    tuned, counts = tuning_tables(con, log.log_id, log.engine)
    diag.findings += tuned
    diag.context.update(counts)
    return diag


def _comparison(b: Budget) -> dict[str, Any]:
    a = b.arithmetic
    planned = {"weights": a.weights_bytes, "activation": a.activation_bytes,
               "non_torch": a.non_torch_bytes, "cuda_graphs": a.cuda_graph_bytes,
               "kv_pool": a.kv_pool_bytes, "kv_tokens": float(a.kv_tokens)}
    return {term: {"log": b.logged.get(term), "arithmetic": planned[term]}
            for term in (*_TERMS, "kv_tokens")}


# Terms a CPU server does not have: it sizes the pool from a set space, without a profile pass.
_NOT_ON_CPU = {"activation": "none on CPU (no profile pass)", "cuda_graphs": "none on CPU"}


def _figure_values(logged: dict[str, float | None], b: Budget | None,
                   cpu: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cmp = _comparison(b) if b is not None else {}
    for term in _TERMS:
        value = logged.get(term)
        out[f"{term}_log"] = _NOT_ON_CPU[term] if cpu and value is None and term in _NOT_ON_CPU \
            else _gib(value)
        if term in cmp:
            out[f"{term}_arithmetic"] = _gib(cmp[term]["arithmetic"])
    if logged.get("kv_tokens") is not None:
        out["kv_tokens_log"] = int(logged["kv_tokens"] or 0)
    if b is not None:
        out["kv_tokens_arithmetic"] = b.arithmetic.kv_tokens
    return out


def _fixes(b: Budget) -> list[dict[str, Any]]:
    fixes = [{"change": f.change, "settings": f.settings, "kv_tokens": f.kv_tokens,
              "cost": f.cost, "fits": f.fits} for f in b.as_logged.fixes]
    extra = graph_fix(b)
    return fixes + ([extra] if extra else [])


def _fix_lines(fixes: list[dict[str, Any]]) -> list[str]:
    out = []
    for f in fixes:
        if f["fits"]:
            out.append(f"{f['change']}: fits, {f['kv_tokens']:,} KV tokens/GPU; cost: {f['cost']}")
        else:
            out.append(f"{f['change']}: does not fit ({f['cost']})")
    return out


def _log_evidence(log: StoredLog) -> Evidence:
    return Evidence("log", {"engine": log.engine, "format": log.log_format,
                            "version": log.version or "not printed", "outcome": log.outcome,
                            "failure_line": log.failure_line, "ranks": log.ranks}, log.sql,
                    log.failure_text)


def _failure_finding(log: StoredLog, b: Budget | None, ev: list[Evidence], read: Reading) -> Finding:
    kind = log.failure_kind or "oom"
    phase = log.failure_phase or "unknown"
    parts = [f"The engine stopped in the {phase} phase (line {log.failure_line})."]
    actions: list[str] = []
    if b is not None:
        p = b.as_logged
        if p.fits:
            parts.append(f"The arithmetic says it fits ({p.kv_tokens:,} KV tokens/GPU): the "
                         "engine's budget differs from it; see the term that differs.")
        else:
            parts.append(f"The arithmetic agrees: it never fit as configured ({p.failing_term} "
                         f"overruns; one {p.max_model_len:,}-token sequence needs "
                         f"{_gib(p.needed_bytes)}/GPU, {_gib(p.kv_pool_bytes)} is left for KV).")
        actions = _fix_lines(_fixes(b))
    if kind == "cuda_graph_oom":
        actions.insert(0, "Capture fewer graphs (--cudagraph-capture-sizes / --cuda-graph-max-bs "
                       "in SGLang) or run --enforce-eager; or lower gpu_memory_utilization so "
                       "capture finds headroom outside the budget.")
    if read.cpu and kind == "kv_cache_too_small":
        need = read.figures.get("needed_kv_bytes")
        est = read.figures.get("estimated_max_model_len")
        actions.append("Raise VLLM_CPU_KVCACHE_SPACE" + (f" to at least {_gib(need)}" if need else "")
                       + " or lower --max-model-len" + (f" to {int(est):,}" if est else "")
                       + "; a CPU server's pool is that space, not a share of a GPU.")
    if not actions and not read.cpu:
        actions = ["Pass --model and --gpu (and --tp, --max-model-len) for the priced fixes."]
    if not actions:
        actions = ["The traceback above the error line names the call that failed."]
    return Finding(f"startup_{kind}", _TITLES.get(kind, "The engine failed to start"), 0.95,
                   "critical", " ".join(parts), [*ev, _log_evidence(log)], actions)


def _term_finding(b: Budget, fig_ev: Evidence) -> Finding | None:
    """The term whose logged figure is furthest from the arithmetic (beyond 0.25 GiB and
    10% of the term), and what that did to the KV pool."""
    cmp = _comparison(b)
    worst, gap = None, 0.0
    for term in _TERMS[:-1]:
        log_v, plan_v = cmp[term]["log"], cmp[term]["arithmetic"]
        if log_v is None:
            continue
        d = log_v - plan_v
        if abs(d) > max(0.25 * GIB, 0.10 * abs(plan_v)) and abs(d) > abs(gap):
            worst, gap = term, d
    if worst is None:
        return None
    kv_log, kv_plan = cmp["kv_pool"]["log"], cmp["kv_pool"]["arithmetic"]
    effect = ""
    if kv_log is not None:
        effect = f" The KV pool came out {_gib(kv_log)} against {_gib(kv_plan)} planned."
    severity = "warning" if not b.as_logged.fits and b.arithmetic.fits else "info"
    return Finding(
        "startup_term_differs", f"The {worst} term differs from the arithmetic", 0.8, severity,
        f"{worst}: the log says {_gib(cmp[worst]['log'])}, the arithmetic {_gib(cmp[worst]['arithmetic'])} "
        f"({'+' if gap > 0 else '-'}{abs(gap) / GIB:.2f} GiB).{effect}",
        [fig_ev],
        [{"weights": "Check the checkpoint's format (quantized? tied embeddings?) and --dtype.",
          "activation": "The profile run's peak follows max_num_batched_tokens and max_num_seqs: "
                        "lower them to shrink it.",
          "non_torch": "Other processes on the GPU, NCCL buffers, or a larger CUDA context: "
                       "check `nvidia-smi` before start.",
          "cuda_graphs": "Fewer capture sizes cut graph memory."}[worst]])
