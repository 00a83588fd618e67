"""OpenAI request parsing and response shapes, independent of HTTP and of the engine.

Every rejection is an `ApiError` carrying OpenAI's error body and the name of the field at
fault, so a client sees one line that says what to fix. Unknown fields are ignored (real
clients send many), but a field we do read is checked strictly: a bool is not an integer,
a string is not a number.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from reference_engine.json_grammar import SchemaError, compile_schema
from reference_engine.tokenizer import CHAT_ROLES

Kind = Literal["completion", "chat"]
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's legacy completions default


class ApiError(Exception):
    """An error answered to the client in OpenAI's JSON shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 type_: str = "invalid_request_error", code: str | int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type_
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code}}


def invalid(param: str | None, message: str) -> ApiError:
    return ApiError(400, message, param=param)


@dataclass
class GenerationRequest:
    """One validated /v1/completions or /v1/chat/completions request (n = 1)."""

    kind: Kind
    model: str
    prompt_text: str | None = None              # completions text, or the rendered chat
    prompt_token_ids: list[int] | None = None   # completions given as token ids
    chat_messages: list[dict[str, str]] | None = None
    max_tokens: int | None = None               # None: fill up to max_model_len (chat)
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    stream: bool = False
    include_usage: bool = False
    priority: int = 0
    json_schema: Any = None                     # the output's JSON schema (structured output)
    user: str | None = None                     # OpenAI's end-user field: the tenant (fair policy)


def decode_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid(None, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise invalid(None, "request body must be a JSON object")
    return body


def _int(body: dict[str, Any], name: str, *, minimum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"'{name}' must be an integer, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise invalid(name, f"'{name}' must be >= {minimum}, got {value}")
    return value


def _number(body: dict[str, Any], name: str, default: float, lo: float, hi: float,
            *, lo_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(name, f"'{name}' must be a number, got {type(value).__name__}")
    if value > hi or value < lo or (lo_open and value == lo):
        bound = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise invalid(name, f"'{name}' must be in {bound}, got {value}")
    return float(value)


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(name, f"'{name}' must be a boolean, got {type(value).__name__}")
    return value


def _stop(body: dict[str, Any]) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise invalid("stop", "'stop' must be a string or a list of strings")
    if any(s == "" for s in value):
        raise invalid("stop", "'stop' strings must not be empty")
    return list(value)


def _common(body: dict[str, Any], kind: Kind) -> GenerationRequest:
    model = body.get("model")
    if model is None:
        raise invalid("model", "'model' is required")
    if not isinstance(model, str):
        raise invalid("model", "'model' must be a string")
    n = _int(body, "n", minimum=1)
    if n is not None and n != 1:
        raise invalid("n", f"'n' must be 1 (this engine returns one choice), got {n}")
    stream = _bool(body, "stream")
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise invalid("stream_options", "'stream_options' is only allowed with stream=true")
        if not isinstance(options, dict):
            raise invalid("stream_options", "'stream_options' must be an object")
        include_usage = _bool(options, "include_usage")
    return GenerationRequest(
        kind=kind, model=model,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        seed=_int(body, "seed"), stop=_stop(body), ignore_eos=_bool(body, "ignore_eos"),
        stream=stream, include_usage=include_usage, priority=_int(body, "priority") or 0,
        json_schema=_json_schema(body), user=_user(body))


def _user(body: dict[str, Any]) -> str | None:
    """OpenAI's `user` (an end-user id): a string, or absent/null/empty for no tenant."""
    value = body.get("user")
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid("user", f"'user' must be a string, got {type(value).__name__}")
    return value or None


def _json_schema(body: dict[str, Any]) -> Any:
    """The schema a request constrains its output to, in any of the forms vLLM's OpenAI
    server takes: `response_format` {"type": "json_schema", "json_schema": {"schema": S}} or
    {"type": "json_object"}, vLLM's `structured_outputs` {"json": S}, its older `guided_json`
    (S or S as a JSON string). None for plain text. Checked by compiling it here, as vLLM
    validates a schema in its front end before the engine compiles it."""
    found: list[tuple[str, Any]] = []
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
            raise invalid("response_format", "'response_format.type' must be text, json_object "
                                             "or json_schema")
        if fmt["type"] == "json_object":
            found.append(("response_format", {"type": "object"}))
        elif fmt["type"] == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise invalid("response_format", "'response_format.json_schema.schema' is required")
            found.append(("response_format", spec["schema"]))
    structured = body.get("structured_outputs")
    if isinstance(structured, dict) and structured.get("json") is not None:
        found.append(("structured_outputs", structured["json"]))
    guided = body.get("guided_json")
    if guided is not None:
        if isinstance(guided, str):
            try:
                guided = json.loads(guided)
            except json.JSONDecodeError as exc:
                raise invalid("guided_json", f"'guided_json' is not valid JSON: {exc.msg}") from None
        found.append(("guided_json", guided))
    if not found:
        return None
    if len(found) > 1:
        raise invalid(found[1][0], f"give one of {', '.join(n for n, _ in found)}, not several")
    param, schema = found[0]
    try:
        compile_schema(schema)
    except SchemaError as exc:
        raise invalid(param, f"'{param}': {exc}") from None
    return schema


def parse_completion(body: dict[str, Any]) -> GenerationRequest:
    req = _common(body, "completion")
    prompt = body.get("prompt")
    # A one-element batch is the same request; larger batches would need n>1-style fan-out.
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if prompt is None:
        raise invalid("prompt", "'prompt' is required")
    if isinstance(prompt, str):
        req.prompt_text = prompt
    elif isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
        req.prompt_token_ids = list(prompt)
    else:
        raise invalid("prompt", "'prompt' must be a string or a non-empty list of token ids "
                                "(batches of several prompts are not supported)")
    max_tokens = _int(body, "max_tokens", minimum=1)
    req.max_tokens = DEFAULT_COMPLETION_MAX_TOKENS if max_tokens is None else max_tokens
    return req


def _message_text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                raise invalid(f"messages[{index}].content",
                              "only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise invalid(f"messages[{index}].content", "'content' must be a string or a list of parts")


def parse_chat(body: dict[str, Any]) -> GenerationRequest:
    req = _common(body, "chat")
    messages = body.get("messages")
    if messages is None:
        raise invalid("messages", "'messages' is required")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "'messages' must be a non-empty list")
    parsed = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise invalid(f"messages[{i}]", "each message must be an object")
        role = msg.get("role")
        if role not in CHAT_ROLES:
            raise invalid(f"messages[{i}].role", f"'role' must be one of {sorted(CHAT_ROLES)}")
        content = msg.get("content")
        if content is None and role == "assistant":
            content = ""  # an assistant turn that only carried tool calls
        parsed.append({"role": role, "content": _message_text(content, i)})
    req.chat_messages = parsed
    # max_completion_tokens supersedes the deprecated max_tokens, as in OpenAI's API.
    max_tokens = _int(body, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", minimum=1)
    req.max_tokens = max_tokens
    return req


@dataclass
class TokenizeRequest:
    """One validated POST /tokenize (vLLM's shape): a completion prompt or chat messages."""

    model: str
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = True


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    return default if body.get(name) is None else _bool(body, name)


def parse_tokenize(body: dict[str, Any]) -> TokenizeRequest:
    """`{"model", "prompt"}` or `{"model", "messages"}`, as vLLM's /tokenize takes them.

    The count a client gets back must be the `usage.prompt_tokens` the same prompt would
    get from a completion, so the defaults are those of the completion path: BOS added to a
    prompt (`add_special_tokens`), and for messages the generation prompt appended and BOS
    added too: this template writes no BOS text of its own, the chat completion adds the
    token, so counting it here is what makes the two agree (vLLM's default of not adding
    special tokens to chat exists because its templates write BOS as text).
    """
    model = body.get("model")
    if model is None:
        raise invalid("model", "'model' is required")
    if not isinstance(model, str):
        raise invalid("model", "'model' must be a string")
    if ("prompt" in body) == ("messages" in body):
        raise invalid(None, "give exactly one of 'prompt' or 'messages'")
    req = TokenizeRequest(model=model,
                          add_generation_prompt=_flag(body, "add_generation_prompt", True),
                          add_special_tokens=_flag(body, "add_special_tokens", True))
    if "prompt" in body:
        prompt = body["prompt"]
        if not isinstance(prompt, str):
            raise invalid("prompt", "'prompt' must be a string")
        req.prompt = prompt
        return req
    req.messages = parse_chat({"model": model, "messages": body["messages"]}).chat_messages
    return req


# ---- response shapes -------------------------------------------------------------------

def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def full_response(req: GenerationRequest, response_id: str, created: int, text: str,
                  finish_reason: str | None, usage_body: dict[str, Any]) -> dict[str, Any]:
    if req.kind == "chat":
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason,
                                  "message": {"role": "assistant", "content": text}}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": response_id, "object": obj, "created": created, "model": req.model,
            "choices": [choice], "usage": usage_body}


def chunk(req: GenerationRequest, response_id: str, created: int, text: str | None,
          finish_reason: str | None = None, *, role: bool = False) -> dict[str, Any]:
    """A streamed delta; for chat, `role=True` makes the opening assistant-role chunk."""
    if req.kind == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
        if text:
            delta["content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                  "finish_reason": finish_reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None,
                  "finish_reason": finish_reason}
        obj = "text_completion"
    body: dict[str, Any] = {"id": response_id, "object": obj, "created": created,
                            "model": req.model, "choices": [choice]}
    if req.include_usage:
        body["usage"] = None
    return body


def usage_chunk(req: GenerationRequest, response_id: str, created: int,
                usage_body: dict[str, Any]) -> dict[str, Any]:
    obj = "chat.completion.chunk" if req.kind == "chat" else "text_completion"
    return {"id": response_id, "object": obj, "created": created, "model": req.model,
            "choices": [], "usage": usage_body}


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def now_s() -> int:
    return int(time.time())
