"""What two captures can be compared on, before anything is ranked.

A capture holds only what its source printed or reported. A setting one side shows and the
other does not is a coverage gap: listed with the side that shows it, never ranked, and never
filled from the catalog as if the other side had shown it (the catalog's default is context,
marked not observed). Two cases are not gaps:

- A vLLM log's `non-default args` lists everything set on the command line, so a setting the
  other side set, and this log does not list, ran at this engine's default: an observed
  difference whose number this side did not print (`AT_DEFAULT`).
- A value printed at start-up against one the same engine version reported after resolving
  it is not a change where something shows the print predates the resolution: the printed
  side printed None (left to start-up), the resolving side flags the key as the engine's
  choice (`_<key>_resolved`, `user_specified_<key>=False`), or that side printed the same
  value itself and resolved it later. The resolved value is final. Without such evidence
  the pair is an ordinary difference: a server started with another flag looks the same.

A start-up print of None for a setting the catalog knows a default of is a placeholder the
engine fills in later, not a value: against a value on the other side it is a gap too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from infbench.config.catalog import CatalogDefault
from infbench.config.model import LIVE_KINDS, Setting, stage
from infbench.config.normalize import effective

AT_DEFAULT = "<engine default>"
SIDES = ("a", "b")


def is_flag(key: str) -> bool:
    """The engine's own provenance flags about another key: evidence, not settings."""
    return (key.startswith("_") and key.endswith("_resolved")) or key.startswith("user_specified_")


@dataclass
class Side:
    engine: str
    version: str | None
    values: dict[str, Any]
    origins: dict[str, str]
    kind: str | None = None
    stages: dict[str, str] = field(default_factory=dict)  # printed | final
    raw: dict[str, str] = field(default_factory=dict)
    superseded: dict[str, Setting] = field(default_factory=dict)  # printed, resolved otherwise later
    lists_every_set: bool = False


def side_of(engine: str, version: str | None, settings: dict[str, Setting], kind: str | None = None,
            printed: dict[str, Setting] | None = None) -> Side:
    values = {k: s.value for k, s in settings.items()}
    eff = effective(values)
    origins = {k: s.origin for k, s in settings.items()}
    for k in eff:
        origins.setdefault(k, "derived")
    stages = {k: "final" if kind in LIVE_KINDS else "printed" if o == "derived" else stage(o, kind)
              for k, o in origins.items()}
    # Only vLLM's `non-default args` line marks values `set` in a log, and it lists them all.
    every_set = kind == "vllm_log" and any(s.origin == "set" for s in settings.values())
    return Side(engine, version, eff, origins, kind, stages,
                {k: s.raw_key for k, s in settings.items()}, dict(printed or {}), every_set)


def side_from(c: Any) -> Side:
    """A Side from a `Captured` or a `StoredConfig`."""
    return side_of(c.engine, c.version, c.settings, c.source_kind, getattr(c, "printed", None))


@dataclass
class Gap:
    key: str
    side: str  # the side that shows it
    value: Any
    origin: str
    context: str | None  # the other side's catalog default, marked not observed

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Finality:
    key: str
    printed_side: str
    printed: Any
    printed_origin: str
    final_side: str
    final: Any
    evidence: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Pair:
    key: str
    a: Any
    b: Any
    origin_a: str
    origin_b: str
    note: str | None = None  # why a side's value is what it is (left at the default)


@dataclass
class Comparison:
    pairs: list[Pair]  # both sides show the key, values differ
    same: int
    gaps: list[Gap]
    finality: list[Finality]


def _flagged(key: str, side: Side) -> str | None:
    names = {key, side.raw.get(key, key).rsplit(".", 1)[-1]}
    for name in sorted(names):
        if side.values.get(f"_{name}_resolved") is True:
            return f"_{name}_resolved=True: the engine resolved it after start-up"
        if side.values.get(f"user_specified_{name}") is False:
            return f"user_specified_{name}=False: nobody set it, the engine chose it"
    return None


def _evidence(key: str, p: Side, f: Side, pn: str, fn: str) -> str | None:
    if p.stages.get(key) != "printed" or f.stages.get(key) != "final":
        return None
    if p.engine != f.engine or not p.version or p.version != f.version:
        return None  # another version may simply have another value
    vp, vf = p.values[key], f.values[key]
    if p.origins.get(key) != "set":
        if vp is None:
            return f"{pn.upper()} printed None: the engine decides it at start-up"
        flag = _flagged(key, f)
        if flag:
            return f"{fn.upper()} reports {flag}"
    s = f.superseded.get(key)
    if s is not None and s.value == vp:
        return f"{fn.upper()} printed {vp!r} too, then resolved it to {vf!r}"
    return None


def _finality(key: str, a: Side, b: Side) -> Finality | None:
    for p, f, pn, fn in ((a, b, "a", "b"), (b, a, "b", "a")):
        why = _evidence(key, p, f, pn, fn)
        if why:
            return Finality(key, pn, p.values[key], p.origins[key], fn, f.values[key], why)
    return None


Catalog = Callable[[Side, str], CatalogDefault | None]


def _context(default: Catalog, side: Side, key: str) -> str | None:
    d = default(side, key)
    return None if d is None else f"catalog default {d.text} for {side.engine} {side.version} (not observed)"


def _placeholder(default: Catalog, side: Side, key: str) -> bool:
    return side.values[key] is None and side.stages.get(key) == "printed" \
        and side.origins.get(key) != "set" and default(side, key) is not None


def compare(a: Side, b: Side, default: Catalog) -> Comparison:
    """Sort every key into agreeing, differing (to rank), printed-vs-resolved, or shown by one
    side. `default(side, key)` is the catalog's default at that side's version: context only."""
    def context(side: Side, key: str) -> str | None:
        return _context(default, side, key)

    pairs: list[Pair] = []
    gaps: list[Gap] = []
    finality: list[Finality] = []
    same = 0
    for key in sorted(set(a.values) | set(b.values)):
        if is_flag(key):
            continue
        if key in a.values and key in b.values:
            va, vb = a.values[key], b.values[key]
            if va == vb:
                same += 1
            elif f := _finality(key, a, b):
                finality.append(f)
            elif (pa := _placeholder(default, a, key)) or _placeholder(default, b, key):
                shows, other, name = (b, a, "b") if pa else (a, b, "a")
                ctx = context(other, key)
                gaps.append(Gap(key, name, shows.values[key], shows.origins[key],
                                "printed None (decided at start-up, not shown)" + (f"; {ctx}" if ctx else "")))
            else:
                pairs.append(Pair(key, va, vb, a.origins[key], b.origins[key]))
            continue
        shows, other, name = (a, b, "a") if key in a.values else (b, a, "b")
        if shows.origins[key] == "set" and other.lists_every_set:
            ctx = context(other, key)
            note = (f"{'B' if name == 'a' else 'A'} does not list it among its non-default args: "
                    f"it ran {other.engine} {other.version or ''}'s default"
                    + (f" ({ctx})" if ctx else ""))
            v = shows.values[key]
            if name == "a":
                pairs.append(Pair(key, v, AT_DEFAULT, "set", "default", note))
            else:
                pairs.append(Pair(key, AT_DEFAULT, v, "default", "set", note))
            continue
        gaps.append(Gap(key, name, shows.values[key], shows.origins[key], context(other, key)))
    return Comparison(pairs, same, gaps, finality)
