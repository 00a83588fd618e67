"""aiohttp OpenAI-compatible HTTP server in front of the engine.

Routes: POST /v1/completions, POST /v1/chat/completions, POST /tokenize (vLLM's: the
prompt's token count as a completion would count it), GET /v1/models, /health, /metrics,
/engine/config, /engine/steps?after=N, /engine/memory.

The engine runs its step loop in its own thread; this server runs one asyncio loop. Each
request gets a `Generation` (streaming.py) that receives engine outputs on the loop. The
server is started with `handler_cancellation=True`, so a client that goes away cancels its
handler, and the handler's `finally` aborts the engine request (the engine frees its blocks).
"""

from __future__ import annotations

import asyncio
import fcntl
import hmac
import logging
import socket
import sys
import termios
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from reference_engine import debug_routes, lora, metrics_spec, protocol
from reference_engine import metrics as prom
from reference_engine import metrics_legacy as prom_legacy
from reference_engine import metrics_sglang as prom_sglang
from reference_engine.config import EngineConfig
from reference_engine.device import exposition as device_exposition
from reference_engine.engine import Engine
from reference_engine.profiling import ProfileError
from reference_engine.protocol import ApiError, GenerationRequest, invalid
from reference_engine.request import SamplingParams
from reference_engine.scheduler import AdmissionError
from reference_engine.streaming import Generation, OutputMailbox
from reference_engine.tokenizer import VOCAB_SIZE, ByteTokenizer

log = logging.getLogger("reference_engine.server")

ENGINE_KEY: web.AppKey[Engine] = web.AppKey("engine", Engine)
CONFIG_KEY: web.AppKey[EngineConfig] = web.AppKey("config", EngineConfig)
METRICS_KEY: web.AppKey[prom.RequestMetrics] = web.AppKey("metrics", prom.RequestMetrics)
TOKENIZER_KEY: web.AppKey[ByteTokenizer] = web.AppKey("tokenizer", ByteTokenizer)
STARTED_KEY: web.AppKey[int] = web.AppKey("started", int)
MAILBOX_KEY: web.AppKey[OutputMailbox] = web.AppKey("mailbox", OutputMailbox)
REQUEST_ID_HEADER = "X-Request-Id"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(err: ApiError) -> web.Response:
    return web.json_response(err.body(), status=err.status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as OpenAI's error JSON; none takes the server down."""
    request_id = request.headers.get(REQUEST_ID_HEADER) or uuid.uuid4().hex
    request["request_id"] = request_id
    try:
        response = await handler(request)
    except ApiError as err:
        response = error_response(err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
        response = error_response(ApiError(exc.status, f"{exc.reason}: {request.method} "
                                           f"{request.path}", type_=kind))
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        response = error_response(ApiError(500, "internal server error", type_="server_error"))
    if not response.prepared:
        response.headers[REQUEST_ID_HEADER] = request_id
    return response


def auth_middleware(api_key: str | None) -> Any:
    """Bearer-token check on /v1/ routes, as vLLM does; /health and /metrics stay open."""
    expected = f"Bearer {api_key}".encode() if api_key else None

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if expected is not None and request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "").encode()
            # compare_digest: the time taken must not reveal how much of the key matched.
            if not hmac.compare_digest(given, expected):
                raise ApiError(401, "invalid or missing API key (send 'Authorization: Bearer "
                                    "<key>')", type_="authentication_error",
                               code="invalid_api_key")
        return await handler(request)

    return check


# ---- generation --------------------------------------------------------------------------

def _prompt_ids(app: web.Application, req: GenerationRequest) -> list[int]:
    tokenizer = app[TOKENIZER_KEY]
    if req.kind == "chat":
        assert req.chat_messages is not None
        return tokenizer.encode(tokenizer.apply_chat_template(req.chat_messages), add_bos=True)
    if req.prompt_token_ids is not None:
        bad = [t for t in req.prompt_token_ids if t >= VOCAB_SIZE]
        if bad:
            raise invalid("prompt", f"'prompt' token id {bad[0]} is outside the vocabulary "
                                    f"(size {VOCAB_SIZE})")
        return req.prompt_token_ids
    assert req.prompt_text is not None
    return tokenizer.encode(req.prompt_text, add_bos=True)


def _sampling_params(config: EngineConfig, req: GenerationRequest,
                     num_prompt_tokens: int) -> SamplingParams:
    field = "messages" if req.kind == "chat" else "prompt"
    room = config.max_model_len - num_prompt_tokens
    if room <= 0:
        raise invalid(field, f"'{field}' is {num_prompt_tokens} tokens; max_model_len is "
                             f"{config.max_model_len}, leaving no room for output")
    max_tokens = room if req.max_tokens is None else req.max_tokens
    if max_tokens > room:
        name = "max_completion_tokens" if req.kind == "chat" else "max_tokens"
        raise invalid(name, f"'{name}' ({max_tokens}) + prompt ({num_prompt_tokens} tokens) "
                            f"exceeds max_model_len ({config.max_model_len})")
    return SamplingParams(max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p,
                          seed=req.seed, stop=req.stop, ignore_eos=req.ignore_eos,
                          priority=req.priority, tenant=req.user,
                          structured_outputs=None if req.json_schema is None
                          else {"json": req.json_schema})


async def _generate(request: web.Request, req: GenerationRequest) -> web.StreamResponse:
    # Owns: the engine request it adds. Every exit path runs `gen.close`, which aborts the
    # engine request unless it already finished, so its blocks are freed exactly once.
    app = request.app
    config, engine = app[CONFIG_KEY], app[ENGINE_KEY]
    adapter = resolve_model(config, engine, req.model)
    prompt_ids = _prompt_ids(app, req)
    params = _sampling_params(config, req, len(prompt_ids))
    params.lora = adapter  # the adapter the model name names (lora.py), None for the base model
    prefix = "chatcmpl" if req.kind == "chat" else "cmpl"
    # Internal ids are always fresh: a client that reuses X-Request-Id can never be handed
    # another request's output.
    response_id = f"{prefix}-{uuid.uuid4().hex}"
    transport = request.transport
    gen = Generation(
        mailbox=app[MAILBOX_KEY], engine=engine, request_id=response_id, req=req,
        tokenizer=app[TOKENIZER_KEY], metrics=app[METRICS_KEY], created=protocol.now_s(),
        byte_budget=config.stream_byte_budget, stream_interval=config.stream_interval,
        transport_buffered=unsent_bytes_probe(transport) if transport else None,
        on_overflow=(transport.abort if transport else None))
    try:
        engine.add_request(response_id, prompt_ids, params, gen.on_output)
    except AdmissionError as exc:
        raise invalid("max_tokens", str(exc)) from None
    try:
        if req.stream:
            return await _stream(request, req, gen)
        await gen.wait_done()
        if not gen.finished:
            raise ApiError(500, "the request was aborted by the engine", type_="server_error")
        return web.json_response(protocol.full_response(
            req, response_id, gen.created, gen.text(), gen.finish_reason, gen.usage()))
    finally:
        gen.close("the response ended before the engine finished (client gone?)")


def resolve_model(config: EngineConfig, engine: Engine, name: str) -> str | None:
    """The adapter a request's model name asks for (None: the base model); an unknown name is
    vLLM's 404."""
    if name == config.model_name:
        return None
    if engine.lora is not None and name in engine.lora:
        return name
    raise ApiError(404, f"The model `{name}` does not exist. Valid aliases: {config.model_name}.",
                   param="model", type_="NotFoundError", code=404)


def unsent_bytes_probe(transport: asyncio.Transport) -> Callable[[], int]:
    """Bytes written for this connection that the client has not taken yet.

    The transport's own buffer only fills once the kernel's send buffer is full, and Linux
    autotunes that up to megabytes; so where the kernel can say how much of its send queue
    is still unsent (SIOCOUTQ), that counts too. Elsewhere only the transport buffer counts.
    """
    sock = transport.get_extra_info("socket")
    outq = getattr(termios, "TIOCOUTQ", None)  # same request number as SIOCOUTQ on Linux
    if sock is None or outq is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return transport.get_write_buffer_size
    fd, buf = sock.fileno(), bytearray(4)

    def unsent() -> int:
        try:
            fcntl.ioctl(fd, outq, buf)
        except OSError:
            return transport.get_write_buffer_size()
        return transport.get_write_buffer_size() + int.from_bytes(buf, sys.byteorder)

    return unsent


async def _stream(request: web.Request, req: GenerationRequest,
                  gen: Generation) -> web.StreamResponse:
    resp = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        REQUEST_ID_HEADER: request["request_id"]})
    await resp.prepare(request)
    try:
        if req.kind == "chat":
            await resp.write(protocol.sse(protocol.chunk(req, gen.request_id, gen.created,
                                                         None, role=True)))
        while data := await gen.next_bytes():
            await resp.write(data)
        if not gen.overflowed:  # after an overflow the transport is closed already
            await resp.write_eof()
    except ConnectionResetError:
        log.debug("client of %s went away mid-stream", gen.request_id)
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, protocol.parse_completion(
        protocol.decode_body(await request.read())))


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, protocol.parse_chat(
        protocol.decode_body(await request.read())))


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's POST /tokenize: `{"count", "max_model_len", "tokens"}` for a prompt or chat
    messages, counted exactly as the completion endpoints count `usage.prompt_tokens`."""
    req = protocol.parse_tokenize(protocol.decode_body(await request.read()))
    config = request.app[CONFIG_KEY]
    resolve_model(config, request.app[ENGINE_KEY], req.model)
    tokenizer = request.app[TOKENIZER_KEY]
    if req.messages is not None:
        text = tokenizer.apply_chat_template(req.messages, req.add_generation_prompt)
    else:
        assert req.prompt is not None
        text = req.prompt
    ids = tokenizer.encode(text, add_bos=req.add_special_tokens)
    return web.json_response({"count": len(ids), "max_model_len": config.max_model_len,
                              "tokens": ids})


# ---- introspection -----------------------------------------------------------------------

async def models(request: web.Request) -> web.Response:
    config, served = request.app[CONFIG_KEY], request.app[ENGINE_KEY].lora
    created = request.app[STARTED_KEY]
    cards = [{"id": config.model_name, "object": "model", "created": created,
              "owned_by": "reference_engine", "root": config.model,
              "max_model_len": config.max_model_len}]
    # The adapters after the base model, as vLLM lists them (root: where it was loaded from).
    cards += [{"id": a.name, "object": "model", "created": created, "owned_by": "reference_engine",
               "root": a.path, "parent": config.model_name, "max_model_len": config.max_model_len}
              for a in (served.adapters.values() if served is not None else ())]
    return web.json_response({"object": "list", "data": cards})


async def health(request: web.Request) -> web.Response:
    # Answers from the HTTP loop even when the engine thread hangs (as a real engine's does);
    # 503 once a rank's collective watchdog fired or a rank failed (debug_routes.py).
    return debug_routes.health_response(request.app[ENGINE_KEY])


async def metrics_route(request: web.Request) -> web.Response:
    app = request.app
    engine = app[ENGINE_KEY]
    requests = app[METRICS_KEY]
    if isinstance(requests, prom_sglang.SglangRequestMetrics):  # --metrics-names sglang
        text = prom_sglang.render(engine.stats(), requests, app[CONFIG_KEY].model_name,
                                  memory_gauges(engine))
    elif isinstance(requests, prom_legacy.LegacyRequestMetrics):  # --metrics-names vllm-legacy
        text = prom_legacy.render_legacy(engine.stats(), requests, app[CONFIG_KEY].model_name,
                                         memory_gauges(engine))
    else:
        text = prom.render(engine.stats(), requests, app[CONFIG_KEY].model_name,
                           memory_gauges(engine))
    # The simulated GPUs' telemetry, in dcgm-exporter's names and labels.
    text += device_exposition(engine.device)
    text += debug_routes.metrics_lines(engine, app[CONFIG_KEY].model_name)
    text += engine.structured.metrics_lines(app[CONFIG_KEY].model_name)
    text += metrics_spec.render(engine.spec_counters(), app[CONFIG_KEY].model_name)
    if engine.lora is not None:  # tuple(): one snapshot of each queue (the engine thread moves them)
        text += lora.metric_lines(tuple(engine.scheduler.running), tuple(engine.scheduler.waiting),
                                  engine.lora.max_loras, time.time())
    return web.Response(body=text.encode(), headers={"Content-Type": prom.CONTENT_TYPE})


def memory_gauges(engine: Engine) -> prom.MemoryGauges:
    # The executor's components (fixed at start) and the process's RSS; the memory-growth
    # fault's retained bytes are not a series of their own: like a real leak, they show
    # only in RSS.
    report = engine.executor.memory_report()
    allocator = getattr(engine.executor, "allocator_stats", None)
    return prom.MemoryGauges(
        rss_bytes=prom.process_rss_bytes(), num_gpu_blocks=engine.pool.num_blocks,
        block_size=engine.pool.block_size,
        components={k: int(v) for k, v in report.items()},
        allocator=allocator() if allocator is not None else {})


async def engine_config(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONFIG_KEY].resolved())


async def engine_steps(request: web.Request) -> web.Response:
    raw = request.query.get("after", "-1")
    try:
        after = int(raw)
    except ValueError:
        raise invalid("after", f"'after' must be an integer step id, got {raw!r}") from None
    return web.json_response({"steps": request.app[ENGINE_KEY].steps_since(after)})


async def engine_memory(request: web.Request) -> web.Response:
    return web.json_response(request.app[ENGINE_KEY].memory_report())


async def start_profile(request: web.Request) -> web.Response:
    try:
        request.app[ENGINE_KEY].profiler.request_start()
    except ProfileError as exc:
        raise invalid(None, str(exc)) from None
    return web.json_response({"status": "profiling"})


async def stop_profile(request: web.Request) -> web.Response:
    profiler = request.app[ENGINE_KEY].profiler
    try:
        # Blocks until the engine thread has written the trace: off the event loop.
        path = await asyncio.get_running_loop().run_in_executor(None, profiler.request_stop)
    except ProfileError as exc:
        raise invalid(None, str(exc)) from None
    return web.json_response({"status": "stopped", "trace": str(path)})


def create_app(engine: Engine, config: EngineConfig) -> web.Application:
    """The application; the caller owns the engine's lifetime (start before, stop after)."""
    app = web.Application(middlewares=[error_middleware, auth_middleware(config.api_key)])
    app[ENGINE_KEY] = engine
    app[CONFIG_KEY] = config
    app[METRICS_KEY] = {"sglang": prom_sglang.SglangRequestMetrics,
                        "vllm-legacy": prom_legacy.LegacyRequestMetrics,
                        }.get(config.metrics_names, prom.RequestMetrics)()
    app[TOKENIZER_KEY] = ByteTokenizer()
    app[STARTED_KEY] = int(time.time())

    async def open_mailbox(app: web.Application) -> None:
        app[MAILBOX_KEY] = OutputMailbox(asyncio.get_running_loop())

    app.on_startup.append(open_mailbox)

    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics_route)
    app.router.add_get("/engine/config", engine_config)
    app.router.add_get("/engine/steps", engine_steps)
    app.router.add_get("/engine/memory", engine_memory)
    app.router.add_post("/start_profile", start_profile)
    app.router.add_post("/stop_profile", stop_profile)
    debug_routes.add_routes(app, engine)  # /debug/ranks, /debug/flight_recorder/dump
    return app
