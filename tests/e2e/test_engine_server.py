"""The reference engine's HTTP surface, against a real `python -m reference_engine` process."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from tests.e2e.engine_process import ABORTED, MODEL, EngineProcess, metric_key, running_engine

pytestmark = pytest.mark.e2e


def sse_events(raw: bytes) -> list[Any]:
    """Parse an SSE body into JSON payloads, with "[DONE]" kept as the string."""
    assert raw.endswith(b"\n\n"), raw[-200:]
    events = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        data = block.removeprefix("data: ")
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def completion(engine: EngineProcess, headers: dict[str, str] | None = None,
               **body: Any) -> tuple[int, dict[str, str], Any]:
    return engine.post_json("/v1/completions", {"model": MODEL, **body}, headers=headers)


def test_completion_non_stream_counts_usage_and_ids_are_unique(engine: EngineProcess) -> None:
    status, headers, body = completion(engine, prompt="Hello, world", max_tokens=12,
                                       ignore_eos=True)
    assert status == 200, body
    assert body["object"] == "text_completion"
    assert body["id"].startswith("cmpl-")
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert isinstance(choice["text"], str)
    # Byte tokenizer: one token per UTF-8 byte plus BOS.
    assert body["usage"]["prompt_tokens"] == len(b"Hello, world") + 1
    assert body["usage"]["completion_tokens"] == 12
    assert body["usage"]["total_tokens"] == 13 + 12
    assert headers["X-Request-Id"]  # generated when the client sends none
    _, headers2, body2 = completion(engine, prompt="Hello, world", max_tokens=2,
                                    headers={"X-Request-Id": "client-chosen"})
    assert headers2["X-Request-Id"] == "client-chosen"
    assert body2["id"] != body["id"] and headers2["X-Request-Id"] != headers["X-Request-Id"]


def test_chat_stream_with_usage_ends_with_usage_chunk_and_done(engine: EngineProcess) -> None:
    status, headers, raw = engine.request("POST", "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "max_completion_tokens": 20, "ignore_eos": True,
        "stream_options": {"include_usage": True}})
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks, usage_chunk = events[:-2], events[-2]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks} | {usage_chunk["id"]}) == 1
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 20
    # A non-streamed request for the same prompt counts the same prompt tokens.
    _, _, whole = engine.post_json("/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 20, "ignore_eos": True})
    assert whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"]["role"] == "assistant"
    assert whole["usage"]["prompt_tokens"] == usage_chunk["usage"]["prompt_tokens"]


def test_stop_string_ends_the_output_before_it(engine: EngineProcess) -> None:
    body = {"prompt": "abc", "max_tokens": 64, "ignore_eos": True, "seed": 3,
            "temperature": 0}
    _, _, full = completion(engine, **body)
    text = full["choices"][0]["text"]
    assert len(text) >= 8, text
    stop = text[4:7]
    expected = text[:text.index(stop)]
    _, _, cut = completion(engine, **body, stop=[stop, "\x00never"])
    assert cut["choices"][0]["text"] == expected
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut["usage"]["completion_tokens"] < 64
    status, _, raw = engine.request("POST", "/v1/completions",
                                    {"model": MODEL, **body, "stop": stop, "stream": True})
    events = sse_events(raw)
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == expected
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


BAD_REQUESTS = [
    ("/v1/completions", b"{not json", None),
    ("/v1/completions", b"[1, 2]", None),
    ("/v1/completions", {"prompt": "x"}, "model"),
    ("/v1/completions", {"model": MODEL}, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": 5}, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": -3}, "max_tokens"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 4095}, "max_tokens"),
    ("/v1/completions", {"model": MODEL, "prompt": "x" * 5000}, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "n": 2}, "n"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "temperature": "hot"}, "temperature"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "top_p": 0}, "top_p"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "stop": [1]}, "stop"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "stream": "yes"}, "stream"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "seed": 1.5}, "seed"),
    ("/v1/completions", {"model": MODEL, "prompt": [1, 999]}, "prompt"),
    ("/v1/chat/completions", {"model": MODEL}, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": []}, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "robot", "content": "x"}]},
     "messages[0].role"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                              "max_completion_tokens": 5000}, "max_completion_tokens"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                              "stream_options": {"include_usage": True}}, "stream_options"),
]


@pytest.mark.parametrize(("path", "body", "param"), BAD_REQUESTS)
def test_bad_input_is_a_400_naming_the_field(engine: EngineProcess, path: str, body: Any,
                                              param: str | None) -> None:
    status, _, raw = engine.request("POST", path, body)
    assert status == 400, raw
    error = json.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    if param:
        assert param.split(".")[-1].split("[")[0] in error["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize"])
def test_a_model_not_served_is_vllms_404_naming_it(engine: EngineProcess, path: str) -> None:
    body: dict[str, Any] = {"model": "gpt-4", "prompt": "x"}
    if path == "/v1/chat/completions":
        body = {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}
    status, _, raw = engine.request("POST", path, body)
    assert status == 404, raw
    assert json.loads(raw)["error"] == {"message": f"The model `gpt-4` does not exist. Valid aliases: {MODEL}.",
                                        "type": "NotFoundError", "param": "model", "code": 404}


def test_server_survives_bad_input_and_unknown_routes(engine: EngineProcess) -> None:
    status, _, raw = engine.request("GET", "/v1/nope")
    assert status == 404 and json.loads(raw)["error"]["type"] == "not_found_error"
    status, _, _ = engine.request("GET", "/v1/completions")
    assert status == 405
    status, _, _ = engine.request("GET", "/health")
    assert status == 200
    assert completion(engine, prompt="still fine", max_tokens=1)[0] == 200


def test_introspection_routes(engine: EngineProcess) -> None:
    models = engine.get_json("/v1/models")
    assert [m["id"] for m in models["data"]] == [MODEL]
    config = engine.get_json("/engine/config")
    assert all(set(v) == {"value", "default"} for v in config.values())
    assert config["model"] == {"value": MODEL, "default": False}
    assert config["block_size"]["default"] is True
    assert config["api_key"]["value"] is None
    completion(engine, prompt="step log", max_tokens=3)
    # The last token reaches the client as its step ends, and the step is logged just after:
    # on a loaded host the log can still grow for a moment once the response is complete.
    steps = engine.get_json("/engine/steps")["steps"]
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        time.sleep(0.2)
        again = engine.get_json("/engine/steps")["steps"]
        if again and steps and again[-1]["step_id"] == steps[-1]["step_id"]:
            break
        steps = again
    assert steps, "a request ran, so steps were logged"
    last = steps[-1]
    for key in ("step_id", "start", "end", "prefill_tokens", "decode_seqs", "preemptions",
                "kv_blocks_used", "kv_blocks_total"):
        assert key in last
    assert engine.get_json(f"/engine/steps?after={last['step_id']}")["steps"] == []
    status, _, raw = engine.request("GET", "/engine/steps?after=soon")
    assert status == 400 and json.loads(raw)["error"]["param"] == "after"
    memory = engine.get_json("/engine/memory")
    assert {"weights", "kv_pool"} <= set(memory)
    m = engine.metrics()
    assert m["vllm:prompt_tokens_total"] > 0 and m["vllm:generation_tokens_total"] > 0
    assert m["vllm:time_to_first_token_seconds_count"] > 0
    assert m[metric_key("vllm:e2e_request_latency_seconds_bucket", le="+Inf")] > 0


def test_api_key_is_required_and_never_shown() -> None:
    key = "sk-test-7f3a9c"
    with running_engine("--api-key", key) as eng:
        body = {"model": MODEL, "prompt": "x", "max_tokens": 1}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": key}):
            status, _, raw = eng.request("POST", "/v1/completions", body, headers=headers)
            assert status == 401, headers
            assert json.loads(raw)["error"]["type"] == "authentication_error"
        status, _, _ = eng.request("POST", "/v1/completions", body,
                                   headers={"Authorization": f"Bearer {key}"})
        assert status == 200
        assert eng.request("GET", "/health")[0] == 200
        raw_config = eng.request("GET", "/engine/config")[2].decode()
        assert key not in raw_config and '"api_key"' in raw_config
        assert key not in eng.request("GET", "/metrics")[2].decode()
    assert not any(key in line for line in eng.stderr_lines)


async def _open_stream(host: str, port: int, body: dict[str, Any],
                       headers: dict[str, str] | None = None,
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(host, port)
    payload = json.dumps(body).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    writer.write(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                 f"{extra}\r\n".encode() + payload)
    await writer.drain()
    return reader, writer


async def _random_disconnects(host: str, port: int, count: int, seed: int) -> None:
    rng = random.Random(seed)
    limit = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with limit:
            body = {"model": MODEL, "prompt": f"disconnect {i} " * rng.randint(1, 40),
                    "max_tokens": rng.randint(50, 400), "ignore_eos": True,
                    "stream": rng.random() < 0.8}
            reader, writer = await _open_stream(host, port, body)
            # Leave at a random moment: before the headers, mid-stream, or after a while.
            budget = rng.choice([0, 1, 200, 2000, 8000])
            got = 0
            deadline = time.monotonic() + 2.0
            while got < budget and (left := deadline - time.monotonic()) > 0:
                try:
                    chunk = await asyncio.wait_for(reader.read(budget - got), left)
                except TimeoutError:
                    break
                if not chunk:
                    break
                got += len(chunk)
            await asyncio.sleep(rng.random() * 0.05)
            writer.transport.abort() if rng.random() < 0.5 else writer.close()

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(count))), 40)


def test_hundred_random_disconnects_return_every_block(engine: EngineProcess) -> None:
    host, port = engine.host_port
    asyncio.run(_random_disconnects(host, port, 100, seed=1234))
    m = engine.wait_idle()
    assert m["vllm:num_requests_running"] == 0
    assert m["vllm:num_requests_waiting"] == 0
    assert m["vllm:kv_cache_usage_perc"] == 0
    assert m[ABORTED] > 0
    # The engine is still healthy and serves a full request afterwards.
    status, _, body = completion(engine, prompt="after the storm", max_tokens=8,
                                 ignore_eos=True)
    assert status == 200 and body["usage"]["completion_tokens"] == 8


def test_reused_request_id_never_mixes_outputs(engine: EngineProcess) -> None:
    results: dict[int, Any] = {}

    def run(max_tokens: int) -> None:
        results[max_tokens] = engine.request("POST", "/v1/completions", {
            "model": MODEL, "prompt": "same id", "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}},
            headers={"X-Request-Id": "dup-1"})

    threads = [threading.Thread(target=run, args=(n,)) for n in (5, 40, 90)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ids = set()
    for n, (status, headers, raw) in results.items():
        assert status == 200 and headers["X-Request-Id"] == "dup-1"
        events = sse_events(raw)
        assert events[-2]["usage"]["completion_tokens"] == n
        ids |= {e["id"] for e in events[:-1]}
    assert len(ids) == 3, "each response carries only its own id"


def _slow_reader(host: str, port: int, stop: threading.Event, out: dict[str, Any]) -> None:
    """Send a long streaming request, then read nothing until told to."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills fast
    sock.connect((host, port))
    payload = json.dumps({"model": MODEL, "prompt": "slow", "max_tokens": 3000,
                          "ignore_eos": True, "stream": True}).encode()
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 f"application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
                 + payload)
    stop.wait(20)
    sock.settimeout(5)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except OSError:
        pass  # reset by the server: expected once it gives up on us
    out["received"] = received
    sock.close()


def test_slow_reader_is_cancelled_without_stalling_other_streams() -> None:
    with running_engine("--stream-byte-budget", "32768") as eng:
        host, port = eng.host_port
        body = {"model": MODEL, "prompt": "normal", "max_tokens": 300, "ignore_eos": True,
                "stream": True}
        t0 = time.monotonic()
        eng.request("POST", "/v1/completions", body)
        alone = time.monotonic() - t0
        stop, out = threading.Event(), {}
        slow = threading.Thread(target=_slow_reader, args=(host, port, stop, out))
        slow.start()
        time.sleep(0.05)
        # This stream runs while the slow one is stuck (and then cancelled) beside it.
        t0 = time.monotonic()
        status, _, raw = eng.request("POST", "/v1/completions", body)
        beside_slow = time.monotonic() - t0
        deadline = time.monotonic() + 15
        while eng.metrics()[ABORTED] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        aborted = eng.metrics()[ABORTED]
        stop.set()
        slow.join(15)
        assert aborted == 1, "the slow reader's request (only) was cancelled"
        assert status == 200 and sse_events(raw)[-1] == "[DONE]"
        assert sse_events(raw)[-2]["choices"][0]["finish_reason"] == "length"
        # Generous: the point is "not stalled", not a latency SLO.
        assert beside_slow < 3 * alone + 1.0, (alone, beside_slow)
        assert b"[DONE]" not in out["received"]
        assert eng.wait_idle()["vllm:kv_cache_usage_perc"] == 0
        assert any("client is not reading" in line for line in eng.stderr_lines)


def test_infbench_engine_serve_starts_the_same_server() -> None:
    # The console script when installed (as CI installs it), else the same entry as a module.
    exe = shutil.which("infbench")
    argv0 = (exe,) if exe else (sys.executable, "-m", "infbench")
    with running_engine(argv0=(*argv0, "engine", "serve")) as eng:
        assert eng.get_json("/v1/models")["data"][0]["id"] == MODEL
        status, _, body = completion(eng, prompt="via infbench", max_tokens=4)
        assert status == 200 and body["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("flags", [("--block-size", "0"), ("--gpu", "no-such-gpu"),
                                   ("--executor", "quantum")])
def test_bad_flags_exit_2_with_one_line(flags: tuple[str, ...]) -> None:
    result = subprocess.run([sys.executable, "-m", "reference_engine", "--port", "0", *flags],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_torch_executor_stream_matches_whole_output() -> None:
    pytest.importorskip("torch")
    with running_engine("--executor", "torch", "--model", "tiny-llama",
                        "--max-model-len", "512") as eng:
        body = {"model": "tiny-llama", "prompt": "héllo €", "max_tokens": 48,
                "temperature": 0, "ignore_eos": True}
        _, _, whole = eng.post_json("/v1/completions", body)
        status, _, raw = eng.request("POST", "/v1/completions", {**body, "stream": True})
        assert status == 200
        events = sse_events(raw)
        streamed = "".join(e["choices"][0]["text"] for e in events[:-1])
        # Random weights emit arbitrary bytes: the stream must still rebuild the same text.
        assert streamed == whole["choices"][0]["text"]
        assert whole["usage"]["prompt_tokens"] == len("héllo €".encode()) + 1
