"""What a capture produces: settings with their origin, and the one error a capture raises.

A capture is all or nothing: a parser either returns a whole `Captured` or raises
`CaptureError` naming the source line, and only a whole `Captured` reaches the store.
Secrets are masked here, before a `Captured` exists, so no code path can store one.

A value's origin says who chose it and when it was reported: `set` (the command line or an
option file), `default` (the engine said so), `printed` (in the configuration the engine
printed as it started, not saying who chose it) or `resolved` (reported after the engine
resolved it: a later log line, a live endpoint). vLLM prints its configuration before the
platform has resolved every value (on a CPU the block size is decided later), so a value
reported later is final over a printed one; the printed one is kept where they differ.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from infbench.config.pyrepr import Call, EnumValue

ORIGINS = ("set", "default", "printed", "resolved")
# Captures of a running engine: whatever it reports is what it runs with.
LIVE_KINDS = frozenset({"live_endpoint", "engine_endpoint"})
MASK = "<masked>"

# The last component of a key that names a credential. `*_tokens` (counts) and `tokenizer*`
# are not secrets; `hf_token`, `api_key`, `admin_api_key`, `password` are.
_SECRET_KEY = re.compile(r"(?:^|[._])(?:api_key|api_keys|token|hf_token|password|passwd|secret|"
                         r"secret_key|access_key|credentials?|authorization|watermark_config)$",
                         re.IGNORECASE)
# Values that are credentials whatever key holds them (an env var, a URL, a stray flag).
_SECRET_VALUE = re.compile(r"\b(?:sk-[A-Za-z0-9_\-]{6,}|hf_[A-Za-z0-9]{16,}|"
                           r"Bearer\s+[A-Za-z0-9._\-]{8,}|ghp_[A-Za-z0-9]{20,})")


class CaptureError(ValueError):
    """The source cannot be captured whole; the message is one line naming where."""


@dataclass(frozen=True)
class Setting:
    key: str  # normalised name
    value: Any  # JSON-able
    origin: str  # set | default | printed | resolved
    raw_key: str  # as the source spelled it
    line: int | None = None  # 1-based source line


@dataclass
class Captured:
    engine: str
    version: str | None
    source_kind: str
    source: str
    settings: dict[str, Setting] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # What the start-up print showed for a key a later report resolved to another value.
    printed: dict[str, Setting] = field(default_factory=dict)

    def put(self, s: Setting, *, override: bool = True) -> None:
        """Add a setting. A value reported after resolution is final over a printed or set one
        (which is kept in `printed` when it differs), and a printed one never replaces it.
        Otherwise a later source of the same key wins unless `override` is False, and `set` is
        never downgraded (the user set it, whatever printed it later)."""
        s = mask_setting(s)
        old = self.settings.get(s.key)
        if old is None:
            self.settings[s.key] = s
            return
        if (s.origin == "resolved") != (old.origin == "resolved"):
            final, shown = (s, old) if s.origin == "resolved" else (old, s)
            if final.value != shown.value:
                self.printed.setdefault(s.key, shown)
                self.settings[s.key] = final
            elif shown.origin == "set":  # the user's value held: it stays theirs
                self.settings[s.key] = Setting(s.key, final.value, "set", shown.raw_key, shown.line)
            else:
                self.settings[s.key] = final
            return
        if not override:
            return
        if old.origin == "set" and s.origin != "set":
            s = Setting(s.key, s.value, "set", old.raw_key, old.line)
        self.settings[s.key] = s

    def values(self) -> dict[str, Any]:
        return {k: s.value for k, s in sorted(self.settings.items())}

    def digest(self) -> str:
        text = json.dumps(self.values(), sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def stage(origin: str, source_kind: str | None) -> str:
    """`final` for a value a running engine reported or a log reported after resolving it;
    `printed` for one from a start-up print or a file of what was asked, which may change."""
    return "final" if source_kind in LIVE_KINDS or origin == "resolved" else "printed"


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def mask_text(text: str) -> str:
    return _SECRET_VALUE.sub(MASK, text)


def mask_value(key: str, value: Any) -> Any:
    if is_secret_key(key) and value not in (None, "", [], False):
        return MASK
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, list):
        return [mask_value("", v) for v in value]
    if isinstance(value, dict):
        return {k: mask_value(str(k), v) for k, v in value.items()}
    return value


def mask_setting(s: Setting) -> Setting:
    masked = mask_value(s.key, s.value)
    return s if masked is s.value else Setting(s.key, masked, s.origin, s.raw_key, s.line)


def jsonable(value: Any) -> Any:
    """Reprs -> JSON values: enums become their member name, calls their keyword dict."""
    if isinstance(value, EnumValue):
        return value.member
    if isinstance(value, Call):
        out = {k: jsonable(v) for k, v in value.kwargs.items()}
        if value.args:
            out["_args"] = [jsonable(v) for v in value.args]
        return out
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN has no JSON form
        return "nan"
    return value


def flatten(prefix: str, value: Any, out: dict[str, Any], depth: int = 0) -> None:
    """Nested dicts become dotted keys (`compilation_config.cudagraph_mode`); lists stay."""
    if isinstance(value, dict) and value and depth < 4:
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out, depth + 1)
    else:
        out[prefix] = value
