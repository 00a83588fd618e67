"""A run's sessions shared among tenants, each request naming its tenant and model (adapter).

`TenantMix` wraps the workloads of a run: with `--tenants`, one workload per tenant (the
run's kind, with that tenant's lengths), each drawing from its own scoped streams
(`Streams.for_tenant`); session k goes to the tenant drawn k-th from the `tenants` stream and
asks for the model drawn k-th from the `adapters` stream (one uniform per session, mapped
through that tenant's mix). So session k is the same tenant, adapter, lengths and schedule
on any target, and one tenant's draws never move another's. Without `--tenants` the run's
own workload runs on the run's streams, as it would without the mix, and only the model is
drawn. Conversations are renumbered by session (two tenants' conversation 0 are different
conversations); a tenant whose workload runs out of sessions ends the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from infbench.loadgen.seeds import Streams, weighted
from infbench.loadgen.workloads.base import Session, Workload
from infbench.loadgen.workloads.prompts import TokenModel
from infbench.loadgen.workloads.tenant_spec import AdapterMix, Mix, TenantSpec


def _uniforms(streams: Streams, batch: int = 256) -> Iterator[float]:
    rng = streams.adapters()
    while True:
        yield from rng.random(batch).tolist()


def _pick(mix: Mix, u: float) -> str | None:
    total = sum(w for _, w in mix)
    acc = 0.0
    for model, w in mix:
        acc += w / total
        if u < acc:
            return model
    return mix[-1][0]


def _tagged(sess: Session, tenant: str | None, model: str | None, conversation: int | None) -> Session:
    """`sess` with each request naming its tenant and model (and its conversation renumbered)."""
    try:
        spec = next(sess)
    except StopIteration:
        return
    try:
        while True:
            spec.tenant, spec.model = tenant, model
            if conversation is not None and spec.conversation_id is not None:
                spec.conversation_id = conversation
            reply = yield spec
            try:
                spec = sess.send(reply)
            except StopIteration:
                return
    finally:
        sess.close()


@dataclass
class TenantMix:
    base: Workload  # the run's own workload (with --tenants: what describe() reports beside them)
    tenants: tuple[TenantSpec, ...] = ()
    workloads: list[Workload] = field(default_factory=list)  # one per tenant, in order
    adapters: AdapterMix | None = None

    def __post_init__(self) -> None:
        if len(self.workloads) != len(self.tenants):
            raise ValueError("tenants: one workload per tenant")
        self.name: str = self.base.name
        self.needs_text: bool = self.base.needs_text
        self.tokens: TokenModel = self.base.tokens

    @property
    def turns(self) -> int:
        """Requests a session can have (the runner and the workers' plan read it)."""
        return max([int(getattr(w, "turns", 1)) for w in (self.base, *self.workloads)])

    def _mix(self, tenant: str | None) -> Mix:
        return self.adapters.mix_for(tenant) if self.adapters is not None else ((None, 1.0),)

    def sessions(self, streams: Streams) -> Iterator[Session]:
        unis = _uniforms(streams)
        if not self.tenants:
            mix = self._mix(None)
            for sess in self.base.sessions(streams):
                yield _tagged(sess, None, _pick(mix, next(unis)), None)
            return
        mixes = [self._mix(t.name) for t in self.tenants]
        picks = weighted(streams.tenants(), [t.weight for t in self.tenants])
        own = [w.sessions(streams.for_tenant(i)) for i, w in enumerate(self.workloads)]
        for k in count():
            i, u = next(picks), next(unis)
            try:
                sess = next(own[i])
            except StopIteration:
                return
            yield _tagged(sess, self.tenants[i].name, _pick(mixes[i], u), k)

    def describe(self) -> dict[str, Any]:
        out = dict(self.base.describe())
        if self.tenants:
            out["tenants"] = [t.describe() for t in self.tenants]
        if self.adapters is not None:
            out["adapters"] = self.adapters.describe()
        return out

    def parts(self) -> list[Workload]:
        """The workloads that send: one per tenant, or the run's own."""
        return list(self.workloads) if self.tenants else [self.base]

