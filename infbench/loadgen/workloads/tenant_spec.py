"""`--tenants` and `--adapters`: who sends a run's requests, and which model name each asks for.

`--tenants 'docs:1:input=3000,chat:3'`: comma-separated `NAME:WEIGHT[:input=LEN][:output=LEN]`.
WEIGHT is the tenant's share of the sessions; `input=`/`output=` take the lengths of
`--input-tokens`/`--output-tokens` (`3000`, `uniform:2000:4000`, ...) and replace them for
that tenant. The tenant goes out as the request body's `user` (OpenAI's end-user field).

`--adapters` names the model each request asks for, LoRA adapters being served under their
own model names (vLLM's `--lora-modules NAME=PATH`); `base` is the run's `--model`:

- `ADAPTER[:WEIGHT],...`: one mix for every request, e.g. `sql:3,chat:1,base:1`;
- `TENANT=ADAPTER[:WEIGHT][+ADAPTER[:WEIGHT]...],...`: a mix per tenant (with `--tenants`),
  e.g. `docs=sql,chat=chat-lora:3+base:1`; a tenant not named sends the base model.

Weights default to 1. Everything is checked here; a bad spec is a ValueError naming the
option and the part that is wrong (`infbench run` exits 2 before anything is sent).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from infbench.loadgen.workloads.lengths import LengthDist

BASE = "base"  # --adapters: the run's own --model, no adapter
TENANTS_FORM = "NAME:WEIGHT[:input=LEN][:output=LEN] (e.g. docs:1:input=3000,chat:3)"
ADAPTERS_FORM = ("ADAPTER[:WEIGHT],... or TENANT=ADAPTER[:WEIGHT][+ADAPTER[:WEIGHT]...],... "
                 f"({BASE} = the run's --model)")
# A name travels in a JSON body and in the store; the separators of the two specs stay out.
_NAME = re.compile(r"[A-Za-z0-9_./@-]+")
_OVERRIDE = re.compile(r":(?=(?:input|output)=)")


@dataclass(frozen=True)
class TenantSpec:
    name: str
    weight: float
    input_len: LengthDist | None = None   # None: the run's --input-tokens
    output_len: LengthDist | None = None  # None: the run's --output-tokens

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "weight": self.weight,
                "input_tokens": None if self.input_len is None else str(self.input_len),
                "output_tokens": None if self.output_len is None else str(self.output_len)}


def _weight(text: str, option: str, entry: str) -> float:
    try:
        w = float(text)
    except ValueError:
        w = math.nan
    if not (w > 0 and math.isfinite(w)):
        raise ValueError(f"{option}: weight {text!r} in {entry!r} must be a positive number")
    return w


def _name(text: str, option: str, entry: str, what: str) -> str:
    if not _NAME.fullmatch(text):
        raise ValueError(f"{option}: {what} {text!r} in {entry!r} must be letters, digits or "
                         "_ . / @ - (no spaces, ':', ',', '+', '=')")
    return text


def parse_tenants(text: str) -> tuple[TenantSpec, ...]:
    """`--tenants`, as the module docstring says."""
    out: list[TenantSpec] = []
    for entry in (e.strip() for e in text.split(",")):
        head, *overrides = _OVERRIDE.split(entry)
        name, sep, weight = head.partition(":")
        if not entry or not sep or not name or ":" in weight:
            raise ValueError(f"tenants: {entry!r} is not {TENANTS_FORM}")
        lengths: dict[str, LengthDist] = {}
        for item in overrides:
            key, _, value = item.partition("=")
            if key in lengths:
                raise ValueError(f"tenants: {key}= is given twice in {entry!r}")
            lengths[key] = LengthDist.parse(value, f"tenants: {name} {key}")
        out.append(TenantSpec(_name(name, "tenants", entry, "tenant name"),
                              _weight(weight, "tenants", entry),
                              lengths.get("input"), lengths.get("output")))
    names = [t.name for t in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"tenants: {twice[0]!r} is named twice")
    return tuple(out)


Mix = tuple[tuple[str | None, float], ...]  # (model name, None = base; weight)


@dataclass(frozen=True)
class AdapterMix:
    """Which model name each request asks for: one mix for all (`shared`), or one per tenant."""

    shared: Mix | None = None
    per_tenant: tuple[tuple[str, Mix], ...] = ()

    def mix_for(self, tenant: str | None) -> Mix:
        """The tenant's mix; a tenant the spec does not name sends the base model."""
        if self.shared is not None:
            return self.shared
        return dict(self.per_tenant).get(tenant or "", ((None, 1.0),))

    @property
    def adapters(self) -> list[str]:
        """Every adapter name the mix can send, in first-named order (base left out)."""
        mixes = [self.shared] if self.shared is not None else [m for _, m in self.per_tenant]
        return list(dict.fromkeys(a for mix in mixes for a, _ in mix if a is not None))

    def describe(self) -> dict[str, list[list[object]]]:
        mixes = {"*": self.shared} if self.shared is not None else dict(self.per_tenant)
        return {k: [[a or BASE, w] for a, w in m] for k, m in mixes.items()}


def _mix(items: list[str], entry: str) -> Mix:
    out: list[tuple[str | None, float]] = []
    for item in items:
        name, sep, weight = item.strip().partition(":")
        model = _name(name, "adapters", entry, "adapter")
        w = _weight(weight, "adapters", entry) if sep else 1.0
        if any(a == (None if model == BASE else model) for a, _ in out):
            raise ValueError(f"adapters: {model!r} is named twice in {entry!r}")
        out.append((None if model == BASE else model, w))
    return tuple(out)


def parse_adapters(text: str, tenants: tuple[TenantSpec, ...] = ()) -> AdapterMix:
    """`--adapters`, as the module docstring says; `tenants` are the run's `--tenants`."""
    entries = [e.strip() for e in text.split(",")]
    if any(not e for e in entries):
        raise ValueError(f"adapters: {text!r} has an empty entry; the form is {ADAPTERS_FORM}")
    keyed = ["=" in e for e in entries]
    if not any(keyed):
        return AdapterMix(shared=_mix(entries, text))
    if not all(keyed):
        raise ValueError(f"adapters: {text!r} mixes the two forms; give {ADAPTERS_FORM}")
    known = {t.name for t in tenants}
    per: dict[str, Mix] = {}
    for entry in entries:
        tenant, _, rest = entry.partition("=")
        if not tenants:
            raise ValueError(f"adapters: {entry!r} names a tenant, but no --tenants are given")
        if tenant not in known:
            raise ValueError(f"adapters: tenant {tenant!r} in {entry!r} is not one of --tenants "
                             f"({', '.join(t.name for t in tenants)})")
        if tenant in per:
            raise ValueError(f"adapters: tenant {tenant!r} is given twice")
        if not rest:
            raise ValueError(f"adapters: {entry!r} names no adapter; the form is {ADAPTERS_FORM}")
        per[tenant] = _mix(rest.split("+"), entry)
    return AdapterMix(per_tenant=tuple(per.items()))
