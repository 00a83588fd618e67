"""Token-weighted fair share across tenants: `--scheduling-policy fair`.

A tenant is the request's `user` (OpenAI's end-user field); requests without one are one
tenant (None). Each tenant is charged for the work the engine did for it, step by step,
priced on the roofline (`infbench.specs.token_cost`): a prefill chunk by its compute, a
decode token by its share of the step's weight read plus the KV it reads. Recomputing a
preempted sequence is work done for it too and is charged again.

The scheduler serves tenants in order of normalised charge (charge / weight), least first:
waiting requests are admitted from that tenant first (first come first served within a
tenant), and the chunked-prefill budget goes to running prefills in the same order. Running
decodes always run, as under fcfs: only new work is ordered, a sequence once admitted is
never held back. So the policy is work-conserving: a tenant with nothing waiting leaves its
share to the others, and between tenants that stay backlogged the normalised charges differ
by at most the work of the sequences already running (the unit test checks that bound).

A tenant that was idle does not bank credit: the virtual time V is the least normalised
charge among the tenants active (a waiting or running sequence) when the scheduler last
looked, and a tenant that becomes active is lifted to at least V. This is the Virtual Token
Counter of Sheng et al., "Fairness in Serving Large Language Models" (OSDI 2024), with
roofline prices for the token weights. No decay: charges only grow.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping

from infbench.specs import get_gpu, get_model
from infbench.specs.roofline import CostModel, cost_model
from infbench.specs.token_cost import decode_seconds, prefill_seconds
from reference_engine.block_pool import InvariantError
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.request import Sequence

Tenant = str | None


def tenant_of(seq: Sequence) -> Tenant:
    return seq.params.tenant


class FairShare:
    """Owns: each tenant's charge (roofline seconds), the virtual time, and which tenants
    were active when the scheduler last looked. Mutated by the engine thread only."""

    def __init__(self, cm: CostModel, weights: Mapping[str, float] | None = None) -> None:
        self.cm = cm
        self.weights = dict(weights or {})
        self.charges: dict[Tenant, float] = {}
        self.total_charged = 0.0
        self.vtime = 0.0
        self.active: set[Tenant] = set()

    def weight(self, tenant: Tenant) -> float:
        return self.weights.get(tenant, 1.0) if tenant is not None else 1.0

    def normalised(self, tenant: Tenant) -> float:
        return self.charges.get(tenant, 0.0) / self.weight(tenant)

    # ---- charging ---------------------------------------------------------------------------
    def charge(self, tenant: Tenant, seconds: float) -> None:
        self.charges[tenant] = self.charges.get(tenant, 0.0) + seconds
        self.total_charged += seconds

    def charge_prefill(self, seq: Sequence, tokens: int, before: int) -> None:
        self.charge(seq.params.tenant, prefill_seconds(self.cm, tokens, before))

    def charge_decodes(self, decodes: Iterable[tuple[Sequence, int]], batch: int) -> None:
        """A step's decodes: each (sequence, tokens scheduled); tokens beyond the one decoded
        are speculative drafts, verified as a small prefill chunk."""
        for seq, n in decodes:
            context = seq.num_computed_tokens + 1  # the new token attends to itself and all before
            cost = decode_seconds(self.cm, context, batch)
            if n > 1:
                cost += prefill_seconds(self.cm, n - 1, context)
            self.charge(seq.params.tenant, cost)

    # ---- ordering ---------------------------------------------------------------------------
    @staticmethod
    def tenant_queues(seqs: Iterable[Sequence]) -> dict[Tenant, deque[Sequence]]:
        """Each tenant's sequences, in the order given."""
        out: dict[Tenant, deque[Sequence]] = {}
        for seq in seqs:
            t = seq.params.tenant
            q = out.get(t)
            if q is None:
                q = out[t] = deque()
            q.append(seq)
        return out

    def queues(self, waiting: Iterable[Sequence],
               running: Iterable[Sequence]) -> dict[Tenant, deque[Sequence]]:
        """Each waiting tenant's sequences in queue order; lifts newly active tenants to the
        virtual time first. One pass over the waiting queue per step that can admit."""
        out = self.tenant_queues(waiting)
        self.observe(set(out) | {s.params.tenant for s in running})
        return out

    def observe(self, now_active: set[Tenant]) -> None:
        """Lift the tenants that became active to the virtual time, then move it on. The
        virtual time first catches up with the tenants active at the last look, charged
        since (one that has gone idle since counts with its charge when it left)."""
        if self.active:
            self.vtime = max(self.vtime, min(self.normalised(t) for t in self.active))
        for t in now_active - self.active:
            floor = self.vtime * self.weight(t)
            if self.charges.get(t, 0.0) < floor:
                self.total_charged += floor - self.charges.get(t, 0.0)
                self.charges[t] = floor
        if now_active:
            self.vtime = max(self.vtime, min(self.normalised(t) for t in now_active))
        self.active = now_active

    def least_charged(self, *queues: dict[Tenant, deque[Sequence]]) -> tuple[bool, Tenant]:
        """(found, tenant): the tenant with work in any of `queues` whose normalised charge is
        least (ties: the one whose first sequence arrived first); found is False when all
        are empty (None is a tenant, so it cannot say "nobody")."""
        best: Tenant = None
        best_key = (math.inf, math.inf)
        for qs in queues:
            for t, q in qs.items():
                if q:
                    key = (self.normalised(t), q[0].arrival_time)
                    if key < best_key:
                        best, best_key = t, key
        return best_key[0] != math.inf, best

    # ---- checking ---------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Charges are finite and non-negative and add up to the total; no active tenant is
        below the virtual time; weights are positive."""
        for t, c in self.charges.items():
            if not (math.isfinite(c) and c >= 0.0):
                raise InvariantError(f"tenant {t!r}: charge {c!r} is not a finite number >= 0")
        if not math.isclose(sum(self.charges.values()), self.total_charged,
                            rel_tol=1e-9, abs_tol=1e-12):
            raise InvariantError(f"charges add up to {sum(self.charges.values())!r}, "
                                 f"the total says {self.total_charged!r}")
        for t in self.active:
            if self.normalised(t) < self.vtime * (1 - 1e-12) - 1e-15:
                raise InvariantError(f"active tenant {t!r} is below the virtual time "
                                     f"({self.normalised(t)!r} < {self.vtime!r})")
        for name, w in self.weights.items():
            if not (math.isfinite(w) and w > 0):
                raise InvariantError(f"tenant {name!r}: weight {w!r} is not positive")


def fair_share_for(config: EngineConfig) -> FairShare | None:
    """The fair-share state of an engine with scheduling_policy fair, else None; prices its
    tenants' work on the roofline of the configured model and GPU."""
    if config.scheduling_policy != "fair":
        return None
    try:
        cm = cost_model(get_model(config.model), get_gpu(config.gpu), config.tensor_parallel_size,
                        config.weight_format, config.kv_format)
    except ValueError as exc:
        raise ConfigError(f"scheduling_policy fair prices work on the roofline of the model "
                          f"and GPU: {exc}") from None
    return FairShare(cm, config.tenant_weights)
