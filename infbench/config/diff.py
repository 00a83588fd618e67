"""`infbench config diff A B`: every difference, ranked by expected impact on a workload.

A difference's score is the knob's weight (catalog/knobs.toml) x how much the workload
exercises it (`RELEVANCE`) x the size of the change: priced by `impact` where infbench's
arithmetic can (KV capacity, batch cap, token budget, CUDA graphs, host overlap, stream
interval), else the knob's typical effect (scaled by the log-ratio for a number). A setting
one side does not print is filled from the catalog's default for that side's version, so a
default that moved shows even when neither log mentions it; each difference says whether
someone set it or the default moved, and cites the catalog's source.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from infbench.config.catalog import CatalogDefault, default_at, knobs
from infbench.config.impact import Workload, price
from infbench.config.model import Setting
from infbench.config.normalize import effective

# Names of what is served, not how: shown apart, never ranked as a cause.
IDENTITY = {"model", "served_model_name", "tokenizer", "model_tag", "download_dir", "revision",
            "tokenizer_revision", "code_revision", "chat_template"}
# Settings with no effect on serving speed: ranked last whatever changed.
INERT = {"host", "port", "seed", "uvicorn_log_level", "log_level", "log_level_http",
         "disable_log_stats", "disable_uvicorn_access_log", "root_path", "allowed_origins",
         "allowed_methods", "allowed_headers", "allow_credentials", "ssl_keyfile", "ssl_certfile",
         "ssl_ca_certs", "ssl_cert_reqs", "middleware", "response_role", "api_key", "hf_token",
         "max_log_len", "nccl_port", "file_storage_path", "file_storage_pth", "decode_log_interval",
         "enable_metrics", "show_time_cost", "watchdog_timeout", "soft_watchdog_timeout",
         "step_log_size", "stream_byte_budget", "engine_label"}
MISSING = "<not printed>"
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
class Side:
    engine: str
    version: str | None
    values: dict[str, Any]
    origins: dict[str, str]


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

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "workload": asdict(self.workload), "same": self.same,
                "differences": [d.as_dict() for d in self.differences],
                "identity": [d.as_dict() for d in self.identity]}


def side_of(engine: str, version: str | None, settings: dict[str, Setting]) -> Side:
    values = {k: s.value for k, s in settings.items()}
    eff = effective(values)
    origins = {k: s.origin for k, s in settings.items()}
    for k in eff:
        origins.setdefault(k, "derived")
    return Side(engine, version, eff, origins)


def _gpu(side: Side, wl: Workload) -> str | None:
    return wl.gpu or side.values.get("gpu") or next(iter(side.values.get("gpu_models") or []), None)


def _fill(side: Side, key: str, wl: Workload) -> tuple[Any, str, CatalogDefault | None]:
    d = default_at(side.engine, side.version, key, gpu=_gpu(side, wl), config=side.values)
    if key in side.values:
        origin = side.origins.get(key, "resolved")
        if side.values[key] is None and origin != "set" and d is not None and d.value is not None:
            return d.value, "catalog default", d  # printed as None: "use the default"
        return side.values[key], origin, d
    if d is not None and d.value is not None:
        return d.value, "catalog default", d
    return MISSING, "absent", d


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
    elif db and not set_by and db.value is not None and db.value != vb and ob != "catalog default":
        parts.append(f"B differs from {b.engine} {b.version}'s default {db.text}: set by other means "
                     "or resolved from the hardware")
    elif da and not set_by and da.value is not None and da.value != va and oa != "catalog default":
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


def diff_sides(a: Side, b: Side, wl: Workload, names: tuple[dict[str, Any], dict[str, Any]]) -> DiffResult:
    catalog = knobs()
    keys = sorted(set(a.values) | set(b.values) | {k for k in catalog if k in a.values or k in b.values})
    filled_a: dict[str, Any] = {}
    filled_b: dict[str, Any] = {}
    rows: list[tuple[str, Any, Any, str, str, CatalogDefault | None, CatalogDefault | None]] = []
    for key in keys:
        va, oa, da = _fill(a, key, wl)
        vb, ob, db = _fill(b, key, wl)
        filled_a[key], filled_b[key] = va, vb
        rows.append((key, va, vb, oa, ob, da, db))
    # Catalog settings neither side printed but whose default moved between the versions.
    for key in catalog:
        if key in filled_a:
            continue
        va, oa, da = _fill(a, key, wl)
        vb, ob, db = _fill(b, key, wl)
        if va is not MISSING and vb is not MISSING:
            filled_a[key], filled_b[key] = va, vb
            rows.append((key, va, vb, oa, ob, da, db))
    diffs: list[Difference] = []
    identity: list[Difference] = []
    same = 0
    for key, va, vb, oa, ob, da, db in rows:
        if va == vb:
            same += 1
            continue
        why = _why(key, a, b, oa, ob, da, db, va, vb)
        if key in IDENTITY:
            identity.append(Difference(key, va, vb, oa, ob, 0.0, (), "what is served, not how", why, None, False))
            continue
        knob = catalog.get(key)
        if knob is None or key in INERT:
            # Below every catalog knob (their floor is FLOOR): unknown first, inert last.
            diffs.append(Difference(key, va, vb, oa, ob, 0.0005 if key in INERT else 0.001, (),
                                    "no known effect on serving performance in the catalog", why, None, False))
            continue
        rel = relevance(knob.when, wl)
        p = price(knob.priced, filled_a, filled_b, wl) if knob.priced else None
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
    return DiffResult(names[0], names[1], wl, diffs, identity, same)
