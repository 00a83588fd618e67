"""Playbook `tenants`: one tenant takes more of the engine than its share while others wait.

Order: price every request on the roofline (accounting.py) -> each tenant's share of the
engine over the run against its share of requests -> the shares while tenants competed
against what each was entitled to (contention.py) -> the finding, when a tenant whose requests
cost more than their number says (its engine share at least HEAVY_RATIO times its request
share) took more than its entitlement while the others were waiting, by more than the
run's own noise, and the others waited at least WARN_WAIT_MS behind others (median); its
severity from that wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from playbooks.findings import Diagnosis, Evidence, Finding
from playbooks.tenants.accounting import Priced, price_requests, resolve_pricing, tenant_rows
from playbooks.tenants.contention import Contention, contention

# A tenant is heavy when its share of the engine is at least this many times its share of
# requests (the long-document tenant: 25% of requests, 70% of the engine is 2.8x).
HEAVY_RATIO = 1.5
# Taking more than its entitlement while others wait counts from this many points of share
# and this many standard errors of the run's own share estimate.
MIN_OVER = 0.05
Z_OVER = 3.0
# What the other tenants waited behind others (median): Nielsen's response-time limits,
# 0.1 s (feels instant) and 1 s (the flow of thought breaks), set the severity.
WARN_WAIT_MS = 100.0
CRITICAL_WAIT_MS = 1000.0
NONE = "(no user)"


@dataclass
class TenantOptions:
    model: str | None = field(default=None, metadata={
        "help": "Model served, when the run does not say (prices on the roofline)."})
    gpu: str | None = field(default=None, metadata={
        "help": "GPU that served the run, when it does not say (e.g. H100-SXM)."})
    tensor_parallel_size: int | None = field(default=None, metadata={
        "help": "Tensor parallelism, when the run does not say.", "flag": "--tp"})

    def validate(self) -> None:
        if self.tensor_parallel_size is not None and self.tensor_parallel_size < 1:
            raise ValueError("--tp must be >= 1")


def name(tenant: str | None) -> str:
    return NONE if tenant is None else tenant


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


def diagnose_tenants(con: duckdb.DuckDBPyConnection, run_ref: str,
                     options: TenantOptions | None = None) -> Diagnosis:
    o = options or TenantOptions()
    o.validate()
    run_id, cm, setup = resolve_pricing(con, run_ref, o.model, o.gpu, o.tensor_parallel_size)
    priced = price_requests(con, run_id, cm)
    sent_sql, rows = tenant_rows(con, run_id, priced)
    found = setup.found.get("tenant_weights")
    weights = {str(k): float(v) for k, v in (found[0] or {}).items()} if found else {}
    diag = Diagnosis("tenants", run_id, {"requests": bool(rows),
                                             "tenants": sum(1 for r in rows if r["tenant"] is not None) > 0})
    diag.context = {"model": setup.model, "gpu": setup.gpu, "tp": setup.tensor_parallel_size,
                    "mean_decode_batch": _r(priced.mean_decode_batch, 2),
                    "tenant_weights": weights or "equal",
                    "tenants": [{**r, "tenant": name(r["tenant"])} for r in rows]}
    if len(rows) < 2:
        diag.notes.append("One tenant in this run (requests without `user` are one tenant): "
                          "nothing to share between (infbench run --tenants sends several).")
        return diag
    cont = contention(con, run_id, priced, weights)
    diag.context.update({"contended_s": _r(cont.seconds, 2),
                         "contended_share": {name(t): _r(v) for t, v in cont.share.items()},
                         "entitled_share": {name(t): _r(v) for t, v in cont.entitled.items()},
                         "contended_share_se": {name(t): _r(v, 4) for t, v in cont.share_se.items()}})
    diag.context["no_findings"] = ("No findings: no tenant took more of the engine than its "
                                   "share while the others waited.")
    if not cont.share:
        diag.notes.append("No two tenants ever waited at the same time: the scheduler never had "
                          "to choose between them, whatever each one's share of the engine.")
        return diag
    f = _unfair_share(rows, cont, priced, sent_sql)
    if f is not None:
        diag.findings.append(f)
    return diag


def _unfair_share(rows: list[dict[str, Any]], cont: Contention, priced: Priced,
                  sent_sql: str) -> Finding | None:
    by = {r["tenant"]: r for r in rows}
    cands = []
    for t, r in by.items():
        over = cont.share.get(t, 0.0) - cont.entitled.get(t, 0.0)
        se = cont.share_se.get(t, 1.0)
        if (r["share_ratio"] >= HEAVY_RATIO and over >= MIN_OVER and over >= Z_OVER * se):
            cands.append((over, t, se))
    if not cands:
        return None
    over, heavy, se = max(cands, key=lambda c: c[0])
    h = by[heavy]
    names = np.asarray([t if t is not None else "\0" for t in priced.tenant], dtype=object)
    others = names != (heavy if heavy is not None else "\0")
    wait, ttft = priced.wait_ms[others], priced.ttft_ms[others]
    wait_p50 = float(np.median(wait)) if wait.size else 0.0
    ttft_p50 = float(np.median(ttft)) if ttft.size else 0.0
    if wait_p50 < WARN_WAIT_MS:
        return None  # the others did not suffer for it: demand, not a scheduling problem
    severity = ("critical" if wait_p50 >= CRITICAL_WAIT_MS and wait_p50 >= 0.5 * ttft_p50
                else "warning")
    who = name(heavy)
    shares = {name(t): {"requests": _r(r["request_share"]), "engine": _r(r["engine_share"]),
                        "contended": _r(cont.share.get(t)), "entitled": _r(cont.entitled.get(t)),
                        "wait_p50_ms": _r(r["wait_p50_ms"], 1), "ttft_p50_ms": _r(r["ttft_p50_ms"], 1)}
              for t, r in by.items()}
    evidence = [
        Evidence("engine_share_by_tenant",
                 {f"{k}.{m}": v for k, s in shares.items() for m, v in s.items()},
                 priced.sql + ";\n" + sent_sql,
                 "engine: roofline cost of the tenant's requests over all (prefill by compute, "
                 "decode by its share of the step's weight read plus its KV); contended: the "
                 "same over the time two or more tenants had requests waiting for a first token; "
                 "entitled: its weight over the waiting tenants' weights, averaged over that time"),
        Evidence("contention", {"contended_s": _r(cont.seconds, 2), "share_over_entitlement": _r(over),
                                "share_standard_error": _r(se, 4),
                                "others_wait_p50_ms": _r(wait_p50, 1),
                                "heavy_wait_p50_ms": _r(h["wait_p50_ms"], 1)},
                 cont.sql, "backlog per tenant from these rows; standard error from the share in "
                           "8 equal slices of the contended time (batch means)")]
    return Finding(
        "tenant_unfair_share", f"Tenant {who} takes more of the engine than its share while others wait",
        min(0.95, 0.6 + 0.05 * over / max(se, 1e-9)), severity,
        f"Tenant {who} sent {h['request_share']:.0%} of the requests but took {h['engine_share']:.0%} "
        f"of the engine's work ({h['share_ratio']:.1f}x; {h['prefill_tokens']} prefill tokens); "
        f"while tenants competed it got {cont.share.get(heavy, 0.0):.0%} against an entitlement of "
        f"{cont.entitled.get(heavy, 0.0):.0%}. The other tenants waited {wait_p50:.0f} ms for their "
        f"first token behind others (median; {who}: {h['wait_p50_ms'] or 0:.0f} ms): they queue "
        f"behind its work.", evidence,
        ["share the engine by work, not by arrival: the bundled engine's --scheduling-policy fair "
         "(token-weighted fair share by the request's user, --tenant-weights NAME=W to weight them)",
         "vLLM has no per-tenant fairness: --scheduling-policy priority with a lower `priority` "
         "for the light tenant's requests serves them first (a strict order: the heavy tenant can "
         "starve), and a smaller --max-num-batched-tokens (long-prefill chunks) keeps one long "
         "prompt from filling a step (see playbooks/tenants/tenants.md)",
         "SGLang: --schedule-policy orders by prefix and arrival, not by tenant; priority "
         "scheduling (--enable-priority-scheduling, the request's priority) is the knob; or give "
         "the long-document tenant its own replica or rate limit at the gateway"],
        scope={"tenant": who})
