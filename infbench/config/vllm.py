"""vLLM server logs and `vllm collect-env` output.

From a server log: the `non-default args: {...}` line (what the user set, vLLM 0.9+), the
`args: Namespace(...)` line of older servers (every argument), the engine's resolved
configuration (`Initializing a V1 LLM engine (vX) with config: k=v, ...`, or the V0
`Initializing an LLM engine (vX)`), and the lines that state one resolved value (the
token budget, the KV blocks and tokens, async scheduling). The configuration lines are
`printed`: vLLM prints them before the platform has resolved every value (on a CPU the
block size is chosen later); a later line's value is `resolved`, and final. Lines may carry any prefix (a process tag,
a docker-compose service name, a timestamp); a record hard-wrapped by a terminal is joined
back before it is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from infbench.config.model import Captured, CaptureError, Setting, flatten, jsonable, mask_text
from infbench.config.normalize import normalise
from infbench.config.pyrepr import Call, ReprError, parse_kv_list, parse_value
from infbench.config.tuning import tuning_settings

# The start of a vLLM log record: `INFO 09-21 23:16:04 ` (with or without [file:line]).
_RECORD = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d\b")
_NONDEFAULT = re.compile(r"non-default args: (?=\{)")
_NAMESPACE = re.compile(r"\] args: (?=Namespace\()")
_ENGINE = re.compile(r"Initializing an? (?:(V[01]) )?LLM engine \(v([^)\s]+)\) with config: ")
_SERVER_VERSION = re.compile(r"vLLM API server version (\S+)|█\s+version (\S+)")

# Lines that state one resolved value: (pattern, key, converter).
_SINGLE: tuple[tuple[re.Pattern[str], str, Callable[[str], Any]], ...] = (
    (re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
     "max_num_batched_tokens", int),
    (re.compile(r"Using max model len (\d+)"), "max_model_len", int),
    (re.compile(r"num_gpu_blocks is: (\d+)"), "num_gpu_blocks", int),
    (re.compile(r"# GPU blocks: (\d+)"), "num_gpu_blocks", int),
    (re.compile(r"\b[A-Z]PU KV cache size: ([\d,]+) tokens"), "kv_cache_tokens",
     lambda s: int(s.replace(",", ""))),
    (re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
     "kv_cache_max_concurrency", float),
    (re.compile(r"Setting attention block size to (\d+) tokens"), "block_size", int),
    (re.compile(r"Asynchronous scheduling is (enabled|disabled)"), "async_scheduling",
     lambda s: s == "enabled"),
)


def looks_like_vllm_log(text: str) -> bool:
    return bool(_NONDEFAULT.search(text) or _ENGINE.search(text) or _NAMESPACE.search(text)
                or "vLLM API server version" in text)


def _continues(lines: list[str], j: int) -> bool:
    return j < len(lines) and bool(lines[j].strip()) and not _RECORD.search(lines[j])


def _unwrap(lines: list[str]) -> tuple[list[str], list[int]]:
    """Undo a terminal's hard wrap: when no line is longer than some width W >= 80 and
    several lines are exactly W wide, each W-wide line continues on the next line unless that
    one starts a new record. Returns the lines and each one's first source line number."""
    width = max((len(x) for x in lines), default=0)
    if width < 80 or sum(len(x) == width for x in lines) < 2:
        return lines, list(range(1, len(lines) + 1))
    out: list[str] = []
    numbers: list[int] = []
    i = 0
    while i < len(lines):
        text, first = lines[i], i + 1
        while len(lines[i]) == width and _continues(lines, i + 1):
            i += 1
            text += lines[i]
        out.append(text)
        numbers.append(first)
        i += 1
    return out, numbers


def _joined(lines: list[str], idx: int, start: int, parse: Callable[[str], Any], number: int) -> Any:
    """Parse the body that starts at `start` of line `idx`; a body still open at its end
    takes the following lines that start no new record (a log that broke a long line)."""
    body, j = lines[idx][start:], idx
    first: ReprError | None = None
    while True:
        try:
            return parse(body.rstrip())
        except ReprError as exc:
            first = first or exc
            if not (exc.truncated and _continues(lines, j + 1)):
                what = "is cut off" if first.truncated else "is garbled"
                raise CaptureError(f"line {number}: the configuration on this line {what} "
                                   f"(column {start + first.offset + 1}: {mask_text(first.in_columns(start))}); "
                                   "nothing was stored") from None
            j += 1
            body += lines[j]


def _add(cap: Captured, raw: str, value: Any, origin: str, line: int) -> None:
    flat: dict[str, Any] = {}
    flatten(raw, jsonable(value), flat)
    for raw_key, v in flat.items():
        key, v = normalise("vllm", raw_key, v)
        if not key:
            continue
        cap.put(Setting(key, v, origin, raw_key, line))


def parse_vllm_log(text: str, source: str) -> Captured:
    lines, numbers = _unwrap(text.splitlines())
    cap = Captured("vllm", None, "vllm_log", source)
    engine_lines = 0
    nondefault: dict[str, Any] = {}
    found = False
    for i, line in enumerate(lines):
        if m := _SERVER_VERSION.search(line):
            cap.version = cap.version or (m.group(1) or m.group(2))
        if m := _NONDEFAULT.search(line):
            found = True
            d = _joined(lines, i, m.end(), parse_value, numbers[i])
            if not isinstance(d, dict):
                raise CaptureError(f"line {numbers[i]}: non-default args is not a dict; nothing was stored")
            nondefault = d
            for k, v in d.items():
                if v is not None:
                    _add(cap, str(k), v, "set", numbers[i])
        elif m := _NAMESPACE.search(line):
            found = True
            ns = _joined(lines, i, m.end(), parse_value, numbers[i])
            if not isinstance(ns, Call):
                raise CaptureError(f"line {numbers[i]}: args is not a Namespace(...); nothing was stored")
            for k, v in ns.kwargs.items():
                _add(cap, k, v, "printed", numbers[i])
        elif m := _ENGINE.search(line):
            found = True
            engine_lines += 1
            if engine_lines > 1:
                continue  # every data-parallel rank may print it; the first is the config
            cap.version = m.group(2)
            if cap.version.startswith("reference-"):  # infbench's reference engine logs as vLLM
                cap.engine, cap.version = "reference", cap.version[len("reference-"):]
            v1 = m.group(1) == "V1"
            cap.put(Setting("engine_v1", v1, "printed", "LLM engine", numbers[i]))
            for k, v, _ in _joined(lines, i, m.end(), parse_kv_list, numbers[i]):
                _add(cap, k, v, "printed", numbers[i])
        for pattern, key, conv in _SINGLE:
            if s := pattern.search(line):
                cap.put(Setting(key, conv(s.group(1)), "resolved", key, numbers[i]), override=False)
    for setting in tuning_settings(lines, numbers):
        cap.put(setting)
    if not found:
        raise CaptureError(f"{source}: no vLLM configuration line (non-default args, args: "
                           "Namespace(...) or 'Initializing ... LLM engine') found; nothing was stored")
    if engine_lines > 1:
        cap.notes.append(f"the engine config line appears {engine_lines} times (one per rank); "
                         "the first was read")
    if "async_scheduling" in nondefault:
        cap.notes.append("async scheduling was set on the command line")
    return cap


_CE_VERSION = re.compile(r"^vLLM Version\s*:\s*(\S+)", re.M)
_CE_FIELDS = {
    "PyTorch version": "torch_version",
    "CUDA runtime version": "cuda_runtime_version",
    "Nvidia driver version": "nvidia_driver_version",
    "ROCM Version": "rocm_version",
    "HIP runtime version": "hip_runtime_version",
}
_CE_KV = re.compile(r"^([A-Za-z][A-Za-z0-9 /_()-]*?)\s*:\s*(.*)$")
_CE_PIP = re.compile(r"^\[pip3?\]\s+([A-Za-z0-9_.\-]+)==(\S+)")
_CE_ENV = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")
_CE_GPU = re.compile(r"^GPU \d+: (.+)$")


def looks_like_collect_env(text: str) -> bool:
    return bool(_CE_VERSION.search(text)) and "PyTorch version" in text


def parse_collect_env(text: str, source: str) -> Captured:
    m = _CE_VERSION.search(text)
    if not m:
        raise CaptureError(f"{source}: no 'vLLM Version' line (not `vllm collect-env` output); "
                           "nothing was stored")
    cap = Captured("vllm", m.group(1), "vllm_collect_env", source)
    gpus: list[str] = []
    for i, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if kv := _CE_KV.match(line):
            name, value = kv.group(1).strip(), kv.group(2).strip()
            if name in _CE_FIELDS and value and value != "Could not collect":
                cap.put(Setting(_CE_FIELDS[name], value, "resolved", name, i))
            elif name == "GPU models and configuration" and value:
                gpus.append(value)
            elif name.startswith("CUDA Archs"):
                cap.put(Setting("cuda_archs", value.split(";")[0].strip(), "resolved", name, i))
        if g := _CE_GPU.match(line):
            gpus.append(g.group(1))
        if p := _CE_PIP.match(line):
            cap.put(Setting(f"pip.{p.group(1).lower()}", p.group(2), "resolved", p.group(1), i))
        if e := _CE_ENV.match(line):
            cap.put(Setting(f"env.{e.group(1)}", e.group(2), "resolved", e.group(1), i))
    if gpus:
        cap.put(Setting("gpu_models", sorted(set(gpus)), "resolved", "GPU models", None))
        cap.put(Setting("gpu_count", len(gpus), "resolved", "GPU models", None))
    return cap
