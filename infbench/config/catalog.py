"""The catalog: known defaults of each engine version, and what each knob does.

Data, not code: `catalog/defaults_<engine>.toml` lists, per setting, the timeline of its
default with the source of each change; `catalog/knobs.toml` lists the metrics a knob
moves, its base weight and the workload property that makes it matter.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIR = Path(__file__).parent / "catalog"
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post\d+)?((?:a|b|rc)\d*)?(?:\.?dev\d*)?")


class CatalogError(ValueError):
    pass


def version_key(version: str) -> tuple[int, int, int, int]:
    """Orderable release key; a pre-release (rc, dev) sorts before its release."""
    m = _VERSION.match(version.strip())
    if not m:
        raise CatalogError(f"version {version!r} is not like 0.11.0")
    pre = 0 if (m.group(4) or ".dev" in version.split("+")[0]) else 1
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), pre


@dataclass(frozen=True)
class Knob:
    key: str
    metrics: tuple[str, ...]
    weight: float
    when: str
    why: str
    priced: str | None = None
    typical: float = 0.3  # usual relative effect when not priced


@dataclass(frozen=True)
class CatalogDefault:
    value: Any  # None when the default is computed at start-up (formula text in `text`)
    text: str  # the value as the catalog states it
    since: str
    source: str
    approx: bool


@functools.cache
def knobs() -> dict[str, Knob]:
    doc = tomllib.loads((DIR / "knobs.toml").read_text(encoding="utf-8"))
    return {k: Knob(k, tuple(v["metrics"]), float(v["weight"]), v["when"], v["why"], v.get("priced"),
                    float(v.get("typical", 0.3))) for k, v in doc["knob"].items()}


@functools.cache
def _defaults(engine: str) -> dict[str, Any]:
    path = DIR / f"defaults_{engine}.toml"
    if not path.is_file():
        return {}
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    return dict(doc.get("setting", {}))


def default_keys(engine: str) -> list[str]:
    """The settings whose default the catalog knows for `engine`."""
    return sorted(_defaults(engine))


def _gpu_family(gpu: str | None) -> str | None:
    if not gpu:
        return None
    m = re.search(r"\b([ABHL]\d{1,3}S?|B\d{3}|MI\d{3}X?)\b", gpu.upper())
    return m.group(1) if m else None


def _formula(text: str, config: dict[str, Any]) -> Any:
    # The one formula vLLM's catalog needs; anything else stays unknown (None), never eval'ed.
    if text == "min(2*max_num_seqs, 512)" and isinstance(config.get("max_num_seqs"), int):
        return min(2 * config["max_num_seqs"], 512)
    if text == "v0 budget":
        if config.get("enable_chunked_prefill") is True:
            return 512
        if isinstance(config.get("max_model_len"), int):
            return max(config["max_model_len"], 2048)
    return None


def default_at(engine: str, version: str | None, key: str, *, gpu: str | None = None,
               config: dict[str, Any] | None = None) -> CatalogDefault | None:
    """The catalog's default of `key` in that engine version, or None when it has none."""
    timeline = _defaults(engine).get(key)
    if timeline is None or not version:
        return None
    try:
        here = version_key(version)
    except CatalogError:
        return None
    current = None
    for change in timeline["changes"]:
        if version_key(change["since"]) <= here:
            current = change
    if current is None:
        return None
    value = current["value"]
    text = str(value)
    family = _gpu_family(gpu)
    by_gpu = current.get("by_gpu", {})
    if by_gpu:
        if family in by_gpu:
            value = by_gpu[family]
            text = f"{value} (on {family})"
        else:
            where = ", ".join(f"{v} on {g}" for g, v in by_gpu.items())
            text = f"{value} ({where})" if family is None else f"{value} (not {'/'.join(by_gpu)})"
    if current.get("formula"):
        value = _formula(str(current["value"]), config or {})
        text = str(current["value"]) + (f" = {value}" if value is not None else "")
    return CatalogDefault(value, text, current["since"], current["source"], bool(current.get("approx")))


def moves_between(engine: str, key: str, old: str | None, new: str | None) -> list[dict[str, Any]]:
    """Default changes of `key` after version `old` up to `new` (both given)."""
    timeline = _defaults(engine).get(key)
    if timeline is None or not old or not new:
        return []
    try:
        lo, hi = version_key(old), version_key(new)
    except CatalogError:
        return []
    if lo > hi:
        lo, hi = hi, lo
    return [c for c in timeline["changes"] if lo < version_key(c["since"]) <= hi]
