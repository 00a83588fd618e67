"""The findings for a log without a start-up error: the engine started, or the log ends
before the server said it was ready, and what this log cannot tell (with the data that would).

What the parse could not recognise comes back from the stored notes: this package may not
import `probes.startup_log`, whose note starts "not recognised from line N".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infbench.specs.gpus import GIB
from playbooks.findings import Evidence, Finding
from playbooks.startup.budget import Budget, StoredLog

_NOT_RECOGNISED = re.compile(r"not recognised from line (\d+)")
KV_SIZED = ("available_kv_bytes", "kv_tokens", "num_gpu_blocks")
WATCH = "Watch the pool during load: `infbench run` then `infbench diagnose memory RUN`."


def _gib(x: float | None) -> str:
    return "n/a" if x is None else f"{x / GIB:.2f} GiB"


@dataclass
class Reading:
    """What the stored log says about how far start-up got."""

    log: StoredLog
    figures: dict[str, float]
    phases: dict[str, tuple[int, int]]    # phase -> (first line, last line)
    not_recognised_from: int | None
    cpu: bool

    @property
    def ready_line(self) -> int | None:
        return self.phases["ready"][0] if "ready" in self.phases else None

    @property
    def sized(self) -> bool:
        return any(k in self.figures for k in KV_SIZED)


def reading(log: StoredLog, figures: dict[str, float], phase_rows: list[Any]) -> Reading:
    n = next((int(m.group(1)) for note in log.notes if (m := _NOT_RECOGNISED.search(note))), None)
    return Reading(log, figures, {r[0]: (int(r[1]), int(r[2])) for r in phase_rows}, n,
                   log.settings.get("device", "").lower() == "cpu")


def _metrics_source(r: Reading) -> str:
    if r.log.engine == "sglang":
        return "the running server's `/get_server_info` (max_total_num_tokens)"
    return ("the running server's `/metrics` line `vllm:cache_config_info` (num_gpu_blocks x "
            "block_size; newer builds also kv_cache_size_tokens and kv_cache_memory_bytes)")


def cpu_kv_evidence(r: Reading, sql: str) -> Evidence | None:
    f = r.figures
    if not r.cpu or not r.sized:
        return None
    tokens, pool = f.get("kv_tokens"), f.get("available_kv_bytes")
    values: dict[str, Any] = {"kv_tokens": int(tokens) if tokens else None, "kv_pool": _gib(pool)}
    if "node_memory_bytes" in f:
        values["node_memory"] = _gib(f["node_memory_bytes"])
    if "kv_space_explicit" in f:
        values["set"] = ("explicitly (VLLM_CPU_KVCACHE_SPACE)" if f["kv_space_explicit"]
                         else "automatically (what the node had left)")
    if tokens and pool:
        values["bytes_per_token"] = round(pool / tokens)
    if "max_concurrency" in f:
        values["max_concurrency"] = (f"{f['max_concurrency']:.2f}x at "
                                     f"{int(f.get('max_concurrency_tokens', 0)):,} tokens")
    return Evidence("kv_pool", values, sql, "the CPU worker's KV space and the pool it makes")


def unknowns(r: Reading) -> dict[str, str]:
    """What this log cannot tell, each with the data that would."""
    out: dict[str, str] = {}
    if not r.sized:
        where = (f"not recognised from line {r.not_recognised_from}" if r.not_recognised_from
                 else "no KV pool line in the log")
        out["kv_pool"] = f"{where}; {_metrics_source(r)} gives it"
    if r.cpu and "weights_bytes" not in r.figures:
        disk = r.figures.get("checkpoint_bytes")
        out["weights_in_memory"] = (
            "the CPU worker prints no size in memory" + (f" (checkpoint {_gib(disk)} on disk)" if disk
                                                         else "")
            + "; the server's resident memory (`/metrics` process_resident_memory_bytes, kept "
              "by `infbench run` in memory_samples) gives what model and runtime take")
    return out


def _unknowns_evidence(r: Reading, **more: str) -> list[Evidence]:
    u = {**unknowns(r), **more}
    return [Evidence("not_in_this_log", dict(u), r.log.sql,
                     "what this log cannot tell, and which data would")] if u else []


def started_finding(r: Reading, b: Budget | None, ev: list[Evidence], log_ev: Evidence) -> Finding:
    f = r.figures
    tokens = b.logged.get("kv_tokens") if b is not None else None
    if r.ready_line is not None:
        summary = f"The server said it was ready (line {r.ready_line})."
    else:
        summary = "The engine sized its KV pool and did not report an error."
    if r.cpu and r.sized:
        pool, tok = f.get("available_kv_bytes"), f.get("kv_tokens")
        how = {1.0: " (set explicitly: VLLM_CPU_KVCACHE_SPACE)",
               0.0: " (set automatically from the node's free memory)"}.get(
                   f.get("kv_space_explicit", -1.0), "")
        summary += (f" Its KV pool: {_gib(pool)}" if pool else " Its KV pool")
        summary += (f" = {int(tok):,} tokens" if tok else "") + how + "."
        summary += (" A CPU server runs no profile pass for the pool and captures no CUDA "
                    "graphs: those terms do not exist here.")
    elif b is not None:
        summary += (f" Log: {_gib(b.logged.get('kv_pool'))} for KV"
                    + (f" = {int(tokens):,} tokens" if tokens else "")
                    + f"; arithmetic: {_gib(b.arithmetic.kv_pool_bytes)} = "
                    f"{b.arithmetic.kv_tokens:,} tokens.")
    actions = [WATCH]
    title, confidence = "The engine started", 0.9
    if not r.sized:
        title, confidence = "The engine started; its KV pool line was not recognised", 0.8
        where = (f"not recognised from line {r.not_recognised_from}" if r.not_recognised_from
                 else "not in the log")
        summary += f" Its KV pool line is {where}: the pool's size is not in what was read."
        actions.insert(0, f"Read the pool from {_metrics_source(r)}.")
    elif r.cpu and f.get("kv_tokens") and f.get("available_kv_bytes"):
        per_gib = f["kv_tokens"] / (f["available_kv_bytes"] / GIB)
        actions.insert(0, f"More concurrency: raise VLLM_CPU_KVCACHE_SPACE (GiB); each GiB holds "
                          f"{per_gib:,.0f} tokens of this model.")
    extra = [e for e in [cpu_kv_evidence(r, ev[-1].sql or "")] if e is not None]
    return Finding("startup_ok", title, confidence, "info", summary,
                   [*ev, *extra, *_unknowns_evidence(r), log_ev], actions)


def incomplete_finding(r: Reading, ev: list[Evidence], log_ev: Evidence, last_phase: str) -> Finding:
    n, path = r.not_recognised_from, r.log.path
    rest = "warm-up, the API server" if r.cpu else "CUDA graph capture, warm-up, the API server"
    if r.sized:
        kv_line = r.phases["kv_cache"][1]
        title = "The log ends after the KV pool was sized, before the server was ready"
        summary = (f"{path}: the KV pool was sized (line {kv_line}) but the log ends before the "
                   f"server said it was ready; the rest of start-up ({rest}) could still have "
                   "failed.")
        if n is not None:
            summary += (f" Not recognised from line {n}: a readiness line in a newer wording "
                        "would be there.")
    elif n is not None:
        title = f"Start-up not recognised from line {n}; the log ends before the server was ready"
        summary = (f"{path}: the last line recognised is in the {last_phase} phase; from line {n} "
                   "on nothing was: a KV pool or readiness line in a wording never seen would be "
                   "there, or the copy was cut. Whether the engine started is not in what was read.")
    else:
        title = "The log ends before the KV pool was sized"
        summary = (f"{path}: the last memory line is in the {last_phase} phase; whether the engine "
                   "started is not in this log.")
    actions = ["Get the whole start-up log (every rank): from `vllm serve` / "
               "`python -m sglang.launch_server` stderr, or the container's log."]
    if n is not None:
        actions.append("Whether it came up: the server's `/health` (or `/v1/models`) answering; "
                       f"then {_metrics_source(r)} for the pool.")
    started = ("the log ends before the server said it was ready; the rest of the log, or the "
               "server's `/health` answering, tells whether it came up")
    return Finding("startup_log_incomplete", title, 0.9 if n is None else 0.7, "warning", summary,
                   [*ev, *_unknowns_evidence(r, started=started), log_ev], actions)
