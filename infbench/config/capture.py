"""`infbench config capture SOURCE`: read a configuration from a file or a server.

A file is recognised by its content, not its name: a vLLM server log, `vllm collect-env`
output, an SGLang log with `server_args=ServerArgs(...)`, or a TensorRT-LLM option YAML. A
URL is asked for the reference engine's `/engine/config`, else what any OpenAI-compatible
server exposes. Everything is parsed before anything is stored.
"""

from __future__ import annotations

from pathlib import Path

from infbench.config.endpoint import capture_url
from infbench.config.model import Captured, CaptureError
from infbench.config.sglang import looks_like_sglang_log, parse_sglang_log
from infbench.config.trtllm import looks_like_trtllm, parse_trtllm_yaml
from infbench.config.vllm import (
    looks_like_collect_env,
    looks_like_vllm_log,
    parse_collect_env,
    parse_vllm_log,
)

MAX_BYTES = 64 << 20  # a server log bigger than this is not a startup log

_KINDS = {
    "vllm_log": parse_vllm_log,
    "vllm_collect_env": parse_collect_env,
    "sglang_log": parse_sglang_log,
    "trtllm_yaml": parse_trtllm_yaml,
}


def detect(text: str) -> str | None:
    if looks_like_collect_env(text):
        return "vllm_collect_env"
    if looks_like_sglang_log(text):
        return "sglang_log"
    if looks_like_vllm_log(text):
        return "vllm_log"
    if looks_like_trtllm(text):
        return "trtllm_yaml"
    return None


def capture_text(text: str, source: str, kind: str | None = None) -> Captured:
    kind = kind or detect(text)
    if kind is None:
        raise CaptureError(f"{source}: not a vLLM log, `vllm collect-env` output, SGLang log or "
                           "TensorRT-LLM option file (no configuration line found); nothing was stored")
    if kind not in _KINDS:
        raise CaptureError(f"kind: {kind!r} is not one of {', '.join(_KINDS)}")
    return _KINDS[kind](text, source)


def capture_source(source: str, *, kind: str | None = None, api_key: str | None = None,
                   timeout: float = 10.0) -> Captured:
    if source.startswith(("http://", "https://")):
        return capture_url(source, api_key, timeout)
    path = Path(source)
    if not path.is_file():
        raise CaptureError(f"{source}: no such file (give a log, collect-env output, option "
                           "YAML, or an http:// URL)")
    if path.stat().st_size > MAX_BYTES:
        raise CaptureError(f"{source}: {path.stat().st_size} bytes is too large for a startup log; "
                           "cut the part from the server's start")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise CaptureError(f"{source}: line {line} is not UTF-8 text; nothing was stored") from None
    try:
        return capture_text(text, source, kind)
    except CaptureError as exc:
        msg = str(exc)
        raise CaptureError(msg if msg.startswith(source) else f"{source}: {msg}") from None
