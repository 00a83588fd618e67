"""SGLang server logs: the `server_args=ServerArgs(...)` line every SGLang server prints.

It lists every argument with its resolved value (SGLang resolves `None` defaults such as
`mem_fraction_static` and `chunked_prefill_size` from the GPU before printing in newer
versions), so every setting's origin is `resolved`; the defaults catalog says which of them
are the version's defaults.
"""

from __future__ import annotations

import re

from infbench.config.model import Captured, CaptureError, Setting, flatten, jsonable, mask_text
from infbench.config.normalize import normalise
from infbench.config.pyrepr import Call, ReprError, parse_value
from infbench.config.tuning import tuning_settings

_SERVER_ARGS = re.compile(r"server_args=(?=ServerArgs\()")
_VERSION = re.compile(r"sglang(?:==| version:? ?|/)v?(\d+\.\d+\.\d+\S*)", re.IGNORECASE)


def looks_like_sglang_log(text: str) -> bool:
    return bool(_SERVER_ARGS.search(text))


def parse_sglang_log(text: str, source: str) -> Captured:
    lines = text.splitlines()
    cap = Captured("sglang", None, "sglang_log", source)
    found = 0
    for i, line in enumerate(lines, start=1):
        if v := _VERSION.search(line):
            cap.version = cap.version or v.group(1)
        m = _SERVER_ARGS.search(line)
        if not m:
            continue
        found += 1
        if found > 1:
            continue  # printed again by each restarted server: the first one is read
        try:
            call = parse_value(line[m.end():].rstrip())
        except ReprError as exc:
            what = "is cut off" if exc.truncated else "is garbled"
            raise CaptureError(
                f"line {i}: server_args on this line {what} (column {m.end() + exc.offset + 1}: "
                f"{mask_text(exc.in_columns(m.end()))}); nothing was stored") from None
        if not isinstance(call, Call) or call.name != "ServerArgs":
            raise CaptureError(f"line {i}: server_args is not ServerArgs(...); nothing was stored")
        for raw, value in call.kwargs.items():
            flat: dict = {}
            flatten(raw, jsonable(value), flat)
            for raw_key, v in flat.items():
                key, v = normalise("sglang", raw_key, v)
                cap.put(Setting(key, v, "resolved", raw_key, i))
    for setting in tuning_settings(lines):
        cap.put(setting)
    if not found:
        raise CaptureError(f"{source}: no `server_args=ServerArgs(...)` line found; nothing was stored")
    if found > 1:
        cap.notes.append(f"server_args appears {found} times; the first was read")
    return cap
