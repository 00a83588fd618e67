"""`infbench config diff A B`: every difference, ranked by expected impact on a workload.

Only settings both sides show are compared (`coverage`): one side's alone is a coverage
gap, listed apart and never ranked, and the catalog's default is never put in for a side
that did not show a value; a value printed at start-up against the one the engine resolved
later says which is final instead of ranking. A difference's score is the knob's weight
(catalog/knobs.toml) x how much the workload exercises it (`RELEVANCE`) x the size of the
change: priced by `impact` where infbench's arithmetic can (KV capacity, batch cap, token
budget, CUDA graphs, host overlap, stream interval), on what both sides show, else the
knob's typical effect (scaled by the log-ratio for a number). Each difference says whether
someone set it or the default moved, citing the catalog; defaults that moved between the
two versions and that neither side shows are listed as catalog context, not observed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from infbench.config.catalog import CatalogDefault, default_at, default_keys, knobs
from infbench.config.coverage import AT_DEFAULT, Finality, Gap, Side, compare, side_from, side_of
from infbench.config.impact import Workload, price

# Names of what is served, not how: shown apart, never ranked as a cause.
IDENTITY = {"model", "served_model_name", "tokenizer", "model_tag", "download_dir", "revision",
            "tokenizer_revision", "code_revision", "chat_template"}
# Settings with no effect on serving speed (where it listens, what it logs, secrets): shown
# apart, never ranked, whatever changed; two servers on one host always differ in `port`.
INERT = {"host", "port", "seed", "uvicorn_log_level", "log_level", "log_level_http",
         "disable_log_stats", "disable_uvicorn_access_log", "root_path", "allowed_origins",
         "allowed_methods", "allowed_headers", "allow_credentials", "ssl_keyfile", "ssl_certfile",
         "ssl_ca_certs", "ssl_cert_reqs", "middleware", "response_role", "api_key", "hf_token",
         "max_log_len", "nccl_port", "file_storage_path", "file_storage_pth", "decode_log_interval",
         "enable_metrics", "show_time_cost", "watchdog_timeout", "soft_watchdog_timeout",
         "step_log_size", "stream_byte_budget", "engine_label"}
MISSING = "<not printed>"  # kept for callers; a diff no longer puts it in for a side
# What pricing may read from a side even when the other does not show it: the hardware both
# are priced on (one for both: `price` takes B's, else A's).
HARDWARE = {"model", "served_model_name", "gpu", "gpu_models", "tensor_parallel_size"}
__all__ = ["AT_DEFAULT", "IDENTITY", "INERT", "MISSING", "Difference", "DiffResult", "Side",
           "diff_sides", "side_from", "side_of"]
FLOOR = 0.002  # the lowest score of a catalog knob: above any setting the catalog does not know


def relevance(when: str, wl: Workload) -> float:
    """How much this workload exercises a knob of the given kind (0..1)."""
    return {
        "always": 1.0,
        "concurrency": 1.0 if wl.concurrency >= 16 else 0.4 + 0.6 * wl.concurrency / 16,
        "long_prompts": max(0.25, min(1.0, wl.input_tokens / 2048)),
        "long_outputs": max(0.3, min(1.0, wl.output_tokens / 512)),
        "shared_prefix": 1.0 if wl.shared_prefix else 0.15,
        "streaming": 1.0 if wl.streaming else 0.2,
        "memory": 0.8,
    }.get(when, 0.5)


@dataclass
class Difference:
    key: str
    a: Any
    b: Any
    origin_a: str
    origin_b: str
    score: float
    metrics: tuple[str, ...]
    reason: str
    why_different: str
    worse: str | None  # "a" | "b" | None
    priced: bool
    numbers: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DiffResult:
    a: dict[str, Any]
    b: dict[str, Any]
    workload: Workload
    differences: list[Difference]
    identity: list[Difference]
    same: int
    inert: list[Difference] = field(default_factory=list)  # no effect on speed: never ranked
    gaps: list[Gap] = field(default_factory=list)  # shown by one side only: never ranked
    finality: list[Finality] = field(default_factory=list)  # printed vs resolved across sides
    superseded: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # within one side
    unobserved_moves: list[dict[str, Any]] = field(default_factory=list)  # catalog context

    def only(self, side: str) -> list[Gap]:
        return [g for g in self.gaps if g.side == side]

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "workload": asdict(self.workload), "same": self.same,
                "differences": [d.as_dict() for d in self.differences],
                "identity": [d.as_dict() for d in self.identity],
                "inert": [d.as_dict() for d in self.inert],
                "only_a": [g.as_dict() for g in self.only("a")],
                "only_b": [g.as_dict() for g in self.only("b")],
                "printed_then_resolved": [f.as_dict() for f in self.finality],
                "superseded_within": self.superseded,
                "catalog_moves_not_observed": self.unobserved_moves}


def _gpu(side: Side, wl: Workload) -> str | None:
    return wl.gpu or side.values.get("gpu") or next(iter(side.values.get("gpu_models") or []), None)


def _default(side: Side, key: str, wl: Workload) -> CatalogDefault | None:
    return default_at(side.engine, side.version, key, gpu=_gpu(side, wl), config=side.values)


def _why(key: str, a: Side, b: Side, oa: str, ob: str, da: CatalogDefault | None,
         db: CatalogDefault | None, va: Any, vb: Any) -> str:
    set_by = [n for n, o in (("A", oa), ("B", ob)) if o == "set"]
    parts = []
    if set_by:
        parts.append(f"set explicitly on {' and '.join(set_by)}")
    moved = da is not None and db is not None and (da.value, da.text if da.value is None else "") \
        != (db.value, db.text if db.value is None else "")
    if moved and not set_by and va == getattr(da, "value", va) and vb == getattr(db, "value", vb):
        assert da is not None and db is not None
        src = db if da.since != db.since else da
        approx = " (release approximate: PR merge date)" if src.approx else ""
        parts.append(f"not set by anyone: {b.engine}'s default moved {da.text} ({a.version}) -> "
                     f"{db.text} ({b.version}); since {src.since}{approx}: {src.source}")
    elif db and not set_by and db.value is not None and db.value != vb and vb != AT_DEFAULT:
        parts.append(f"B differs from {b.engine} {b.version}'s default {db.text}: set by other means "
                     "or resolved from the hardware")
    elif da and not set_by and da.value is not None and da.value != va and va != AT_DEFAULT:
        parts.append(f"A differs from {a.engine} {a.version}'s default {da.text}: set by other means "
                     "or resolved from the hardware")
    if not parts:
        parts.append(f"origins: A {oa}, B {ob}")
    return "; ".join(parts)


def _magnitude(typical: float, va: Any, vb: Any) -> float:
    """An unpriced change: the knob's typical effect, scaled for numbers by how far apart."""
    if isinstance(va, int | float) and isinstance(vb, int | float) and not isinstance(va, bool) \
            and not isinstance(vb, bool) and va > 0 and vb > 0:
        return typical * max(0.5, min(2.0, abs(math.log(vb / va))))
    return typical


def _pricing_view(side: Side, other: Side) -> dict[str, Any]:
    """What pricing reads of a side: only keys both sides show (so an assumption never stands
    in for a value on one side only), plus the hardware both are priced on."""
    return {k: v for k, v in side.values.items() if k in other.values or k in HARDWARE}


def _unobserved_moves(a: Side, b: Side, wl: Workload) -> list[dict[str, Any]]:
    out = []
    for key in sorted(set(default_keys(a.engine)) | set(default_keys(b.engine))):
        if key in a.values or key in b.values:
            continue
        da, db = _default(a, key, wl), _default(b, key, wl)
        if da is None or db is None or da.text == db.text:
            continue
        src = db if da.since != db.since else da
        out.append({"key": key, "a": da.text, "b": db.text, "since": src.since, "source": src.source,
                    "approx": src.approx})
    return out


def _superseded(side: Side) -> list[dict[str, Any]]:
    return [{"key": k, "printed": s.value, "printed_origin": s.origin, "printed_line": s.line,
             "final": side.values.get(k)} for k, s in sorted(side.superseded.items())]


def diff_sides(a: Side, b: Side, wl: Workload, names: tuple[dict[str, Any], dict[str, Any]]) -> DiffResult:
    catalog = knobs()
    cmp = compare(a, b, lambda side, key: _default(side, key, wl))
    view_a, view_b = _pricing_view(a, b), _pricing_view(b, a)
    diffs: list[Difference] = []
    identity: list[Difference] = []
    inert: list[Difference] = []
    for pair in cmp.pairs:
        key, va, vb, oa, ob = pair.key, pair.a, pair.b, pair.origin_a, pair.origin_b
        da, db = _default(a, key, wl), _default(b, key, wl)
        why = _why(key, a, b, oa, ob, da, db, va, vb) + (f"; {pair.note}" if pair.note else "")
        if key in IDENTITY:
            identity.append(Difference(key, va, vb, oa, ob, 0.0, (), "what is served, not how", why, None, False))
            continue
        if key in INERT:
            inert.append(Difference(key, va, vb, oa, ob, 0.0, (), "no effect on serving speed", why, None, False))
            continue
        knob = catalog.get(key)
        if knob is None:
            # Below every catalog knob (their floor is FLOOR).
            diffs.append(Difference(key, va, vb, oa, ob, 0.001, (),
                                    "no known effect on serving performance in the catalog", why, None, False))
            continue
        rel = relevance(knob.when, wl)
        # A side left at its default has no number to price with.
        p = price(knob.priced, view_a, view_b, wl) if knob.priced and AT_DEFAULT not in (va, vb) else None
        if p is not None:
            mag = min(3.0, p.magnitude) if p.magnitude > 0 else 0.05
            reason = f"{knob.why}. Priced: {p.reason}"
            diffs.append(Difference(key, va, vb, oa, ob, max(FLOOR, round(knob.weight * rel * mag, 4)),
                                    knob.metrics, reason, why, p.worse, True, p.numbers))
        else:
            mag = _magnitude(knob.typical, va, vb)
            diffs.append(Difference(key, va, vb, oa, ob, max(FLOOR, round(knob.weight * rel * mag, 4)),
                                    knob.metrics, knob.why, why, None, False))
    diffs.sort(key=lambda d: (-d.score, d.key))
    superseded = {n: rows for n, side in (("a", a), ("b", b)) if (rows := _superseded(side))}
    return DiffResult(names[0], names[1], wl, diffs, identity, cmp.same, inert, cmp.gaps, cmp.finality,
                      superseded, _unobserved_moves(a, b, wl))
