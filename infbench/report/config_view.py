"""A run's resolved configuration as `key = value` rows a person can scan.

Nested settings are flattened to dotted keys. The engine's own configuration lists only the
settings that differ from the engine's defaults (the ones that explain a difference between
two runs); how many defaults were left out is said, not hidden.
"""

from __future__ import annotations

import json
from typing import Any


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict) and value:
        for k in sorted(value):
            _flatten(f"{prefix}.{k}" if prefix else str(k), value[k], out)
    else:
        out.append((prefix, _text(value)))


def config_rows(config: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key in sorted(config):
        value = config[key]
        if key == "engine_config" and isinstance(value, dict):
            entries = {k: v for k, v in value.items() if isinstance(v, dict) and "value" in v}
            changed = {k: v["value"] for k, v in entries.items() if not v.get("default", False)}
            for k in sorted(changed):
                rows.append((f"engine_config.{k}", _text(changed[k])))
            rows.append(("engine_config", f"{len(entries) - len(changed)} settings at their defaults "
                                          "(`show --json` lists them)"))
            continue
        _flatten(key, value, rows)
    return rows
