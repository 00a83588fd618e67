"""Configurations a running server exposes over HTTP.

- The reference engine's `/engine/config`: `{name: {value, default}}`, every setting with
  whether it is the default, so origins are exact.
- Any OpenAI-compatible server: `/v1/models` (vLLM adds `max_model_len`), `/version`
  (vLLM), and the Prometheus `vllm:cache_config_info` gauge, whose labels are the KV cache
  settings (`block_size`, `cache_dtype`, `gpu_memory_utilization`, `num_gpu_blocks`, ...).
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from infbench.config.model import Captured, CaptureError, Setting, flatten
from infbench.config.normalize import normalise
from infbench.http_client import NoAnswer, request
from infbench.promtext import parse_labels, parse_raw

_INFO = re.compile(r"vllm:cache_config_info|sglang:[a-z_]*config_info")
# Labels that name the series (which engine core, which model), not a setting.
_SERIES_LABELS = {"engine", "model_name"}


def _get(url: str, api_key: str | None, timeout: float) -> tuple[int, str]:
    """(status, body); the body only of a 2xx answer. The key goes in a header only."""
    try:
        answer = request("GET", url, timeout_s=timeout,
                         headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    except NoAnswer as exc:
        raise CaptureError(f"{url}: cannot connect ({exc}); nothing was stored") from None
    if not 200 <= answer.status < 300:
        return answer.status, ""
    return answer.status, answer.body.decode("utf-8", "replace")


def _label_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", ""):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def from_engine_config(doc: Any, source: str) -> Captured:
    """The reference engine's `/engine/config` document (also stored in runs.config)."""
    if not isinstance(doc, dict) or not doc or not all(
            isinstance(v, dict) and "value" in v for v in doc.values()):
        raise CaptureError(f"{source}: not an engine config document ({{name: {{value, default}}}}); "
                           "nothing was stored")
    version = doc.get("defaults", {}).get("value")
    cap = Captured("reference", str(version) if version is not None else None,
                   "engine_endpoint", source)
    for name, entry in doc.items():
        flat: dict[str, Any] = {}
        flatten(name, entry["value"], flat)
        origin = "default" if entry.get("default") else "set"
        for raw_key, v in flat.items():
            key, v = normalise("reference", raw_key, v)
            cap.put(Setting(key, v, origin, raw_key, None))
    return cap


def from_info_labels(metric: str, labels: str, cap: Captured) -> int:
    """Settings from one `*_config_info` sample's labels (`k="v",...` as printed; lenient,
    as the scrape that stored them was)."""
    n = 0
    for name, raw in parse_labels(labels, strict=False).items():
        if name in _SERIES_LABELS:
            continue
        key, v = normalise("vllm", name, _label_value(raw))
        cap.put(Setting(key, v, "resolved", f"{metric}.{name}", None), override=False)
        n += 1
    return n


def from_metrics(text: str, cap: Captured) -> int:
    """Settings from `*_config_info` gauges' labels; returns how many were found."""
    return sum(from_info_labels(name, labels, cap) for name, labels, _ in parse_raw(text)
               if _INFO.fullmatch(name))


def capture_url(url: str, api_key: str | None = None, timeout: float = 10.0) -> Captured:
    base = url.rstrip("/")
    if base.endswith("/engine/config"):
        base = base[: -len("/engine/config")]
    status, body = _get(base + "/engine/config", api_key, timeout)
    if status == 200:
        try:
            return from_engine_config(json.loads(body), base + "/engine/config")
        except json.JSONDecodeError:
            raise CaptureError(f"{base}/engine/config: not JSON; nothing was stored") from None
    cap = Captured("unknown", None, "live_endpoint", base)
    status, body = _get(base + "/v1/models", api_key, timeout)
    if status != 200:
        raise CaptureError(f"{base}/v1/models answered HTTP {status}; not an OpenAI-compatible "
                           "server (or the API key is missing); nothing was stored")
    try:
        models = json.loads(body).get("data") or []
    except (json.JSONDecodeError, AttributeError):
        raise CaptureError(f"{base}/v1/models: not an OpenAI model list; nothing was stored") from None
    if models:
        first = models[0]
        cap.put(Setting("model", first.get("root") or first.get("id"), "resolved", "root", None))
        cap.put(Setting("served_model_name", first.get("id"), "resolved", "id", None))
        if isinstance(first.get("max_model_len"), int):
            cap.put(Setting("max_model_len", first["max_model_len"], "resolved", "max_model_len", None))
        owner = str(first.get("owned_by") or "").lower()
        if owner in ("vllm", "sglang"):
            cap.engine = owner
    status, body = _get(base + "/version", api_key, timeout)
    if status == 200:
        with contextlib.suppress(json.JSONDecodeError, AttributeError):
            cap.version = str(json.loads(body).get("version")) or None
    status, body = _get(base + "/metrics", api_key, timeout)
    if status == 200 and from_metrics(body, cap) and cap.engine == "unknown":
        cap.engine = "vllm" if "vllm:" in body else "sglang"
    if not cap.settings:
        cap.notes.append("the server exposes no configuration beyond its model list")
    return cap
