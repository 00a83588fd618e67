"""Request bodies for the two OpenAI endpoints, built once per request (never per chunk)."""

from __future__ import annotations

import json
from typing import Any

from infbench.loadgen.workloads.base import RequestSpec

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def flatten(messages: list[dict[str, str]]) -> str:
    """A conversation as plain text, for the completions endpoint."""
    return "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages) + "\nAssistant:"


def build_body(
    spec: RequestSpec,
    *,
    endpoint: str,
    model: str,
    ignore_eos: bool,
    temperature: float,
    include_usage: bool = True,
) -> bytes:
    body: dict[str, Any] = {"model": spec.model or model, "max_tokens": spec.max_tokens,
                            "stream": True, "temperature": temperature}
    if spec.tenant is not None:
        body["user"] = spec.tenant  # OpenAI's end-user field; the bundled engine reads its tenant here
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    if endpoint == "chat":
        body["messages"] = spec.messages or [{"role": "user", "content": spec.prompt or ""}]
    else:
        body["prompt"] = spec.prompt if spec.prompt is not None else flatten(spec.messages or [])
    if spec.extra:
        body.update(spec.extra)
    return json.dumps(body, separators=(",", ":")).encode()


def auth_headers(api_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def redact(text: str | None, secret: str | None) -> str | None:
    """Servers sometimes echo the key back in an error message; it must never be stored."""
    if text is None or not secret:
        return text
    return text.replace(secret, "***")
