"""A streaming OpenAI-style server whose chunk schedule is known, for tests and benchmarks.

Run: ``python tests/support/sse_server.py --port 0 --ttft-ms 20 --itl-ms 5``; it prints
``INFO: serving on http://127.0.0.1:PORT`` once listening.

Every completion streams ``max_tokens`` content events: event k is due ``ttft + k * itl``
after the request arrived. Each write carries the events due by then, so a server that wakes
late (a busy machine) catches up in one write instead of several back to back; ``--burst B``
writes B events at a time, when the last of them is due, so the client's reads coalesce by
design. (0/0 = as fast as the socket takes them, one event per write, yielding to other
streams every ``--burst`` events so streams interleave as in a real engine step.) After the
last token comes the finish event (choices, no text); ``--tail-ms`` delays the usage event
(when asked for) and ``[DONE]`` after it, as a server that sends them late would.

With ``--log-timing`` the server keeps the monotonic time of each content event's write
(events of one write share it), served at ``GET /_log`` keyed by the ``x-request-id`` it
returned: that is the truth a timing test compares the client's timestamps against (same
host, same CLOCK_MONOTONIC). ``GET /_arrivals`` gives, by the same key, when the server had
read each request, so a test can split a measured TTFT into the server's part and the
client's; ``GET /_tail`` when it wrote the finish event, usage (null without) and ``[DONE]``.

With ``--tokenize`` it also answers vLLM's ``POST /tokenize`` (``{"model", "prompt"}`` or
``{"model", "messages"}`` -> ``{"count", "max_model_len", "tokens"}``), counting exactly as
its completions count ``prompt_tokens``; without it that route is a 404, as on a server
that has none.

``--faults MODE:N,...`` makes every N-th request (by arrival order) misbehave:
``http500``, ``http429``, ``malformed`` (a non-JSON event mid-stream), ``truncate`` (connection
closed mid-stream), ``badutf8`` (invalid UTF-8 inside an event), ``reset`` (connection
aborted before a response), ``hang`` (headers, then silence), ``error_event`` (an in-stream
error object). Written on raw asyncio streams so that it outpaces the client under test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from typing import Any

TOKEN_TEXT = " tok"


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model: str = args.model
        self.ttft_ns = int(args.ttft_ms * 1e6)
        self.itl_ns = int(args.itl_ms * 1e6)
        self.faults: list[tuple[str, int]] = []
        for item in filter(None, (args.faults or "").split(",")):
            mode, _, every = item.partition(":")
            self.faults.append((mode, int(every)))
        self.counter = 0
        self.tail_ns = int(args.tail_ms * 1e6)
        self.timing: dict[str, list[int]] = {}
        self.arrivals: dict[str, int] = {}
        self.tails: dict[str, list[int | None]] = {}
        self.completed = 0
        self.running = 0
        self.mid_stream = 0  # running requests sent 3 or more of their tokens, not yet all

    # -- HTTP plumbing -------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                keep = await self.route(method, path, headers, body, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()

    @staticmethod
    def send_json(writer: asyncio.StreamWriter, status: int, obj: Any, extra: str = "") -> None:
        data = json.dumps(obj).encode()
        reason = {200: "OK", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
                  500: "Internal Server Error", 400: "Bad Request"}.get(status, "X")
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n{extra}\r\n".encode() + data
        )

    @staticmethod
    def error(writer: asyncio.StreamWriter, status: int, message: str, code: str) -> None:
        Server.send_json(writer, status, {"error": {"message": message, "type": code,
                                                    "param": None, "code": status}})

    async def route(self, method: str, path: str, headers: dict[str, str], body: bytes,
                    writer: asyncio.StreamWriter) -> bool:
        key = self.args.api_key
        if key and path.startswith("/v1") and headers.get("authorization") != f"Bearer {key}":
            self.error(writer, 401, "invalid api key", "authentication_error")
            return True
        if path == "/v1/models":
            self.send_json(writer, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "owned_by": "test"}]})
            return True
        if path == "/metrics":
            text = (
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="{self.model}"}} {self.running}\n'
                "# TYPE vllm:request_success_total counter\n"
                f'vllm:request_success_total{{model_name="{self.model}"}} {self.completed}\n'
                "# TYPE sse_server_mid_stream gauge\n"
                f"sse_server_mid_stream {self.mid_stream}\n"
            ).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                         + str(len(text)).encode() + b"\r\n\r\n" + text)
            return True
        if path == "/_log":
            self.send_json(writer, 200, self.timing)
            return True
        if path == "/_arrivals":
            self.send_json(writer, 200, self.arrivals)
            return True
        if path == "/_tail":
            self.send_json(writer, 200, self.tails)
            return True
        if path == "/tokenize" and method == "POST" and self.args.tokenize:
            if self.args.tokenize_delay_ms > 0:
                # counts answered out of order, as a busy server's are
                await asyncio.sleep(random.uniform(0, self.args.tokenize_delay_ms) / 1e3)
            self.tokenize(json.loads(body), writer)
            return True
        if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            return await self.completion(path, json.loads(body), writer)
        self.error(writer, 404, f"no route {path}", "not_found")
        return True

    @staticmethod
    def count_prompt(chat: bool, req: dict[str, Any]) -> int:
        """The prompt_tokens this server reports: a quarter token per byte of the prompt (of
        the messages' JSON for chat), plus one, so counts are not additive per word."""
        prompt = json.dumps(req["messages"]) if chat else req.get("prompt", "")
        return len(prompt.encode()) // 4 + 1

    def tokenize(self, req: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        if req.get("model") != self.model:
            self.error(writer, 404, f"The model `{req.get('model')}` does not exist.", "NotFoundError")
            return
        n = self.count_prompt("messages" in req, req)
        self.send_json(writer, 200, {"count": n, "max_model_len": 1 << 20, "tokens": list(range(n))})

    # -- completions ---------------------------------------------------------------------
    def fault_for(self, n: int) -> str | None:
        for mode, every in self.faults:
            if n % every == every - 1:
                return mode
        return None

    async def completion(self, path: str, req: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        arrival = time.monotonic_ns()
        n = self.counter
        self.counter += 1
        if req.get("model") != self.model:
            self.error(writer, 404, f"The model `{req.get('model')}` does not exist.", "NotFoundError")
            return True
        chat = path.endswith("chat/completions")
        prompt_tokens = self.count_prompt(chat, req)
        max_tokens = int(req.get("max_tokens") or 16)
        fault = self.fault_for(n)
        if fault == "reset":
            writer.transport.abort()
            return False
        if fault in ("http500", "http429"):
            self.error(writer, int(fault[4:]), "injected failure", "server_error")
            return True
        rid = f"req-{n}"
        cid = ("chatcmpl-" if chat else "cmpl-") + str(n)
        if not req.get("stream"):
            text = TOKEN_TEXT * max_tokens
            choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                       "finish_reason": "length"} if chat else
                      {"index": 0, "text": text, "finish_reason": "length"})
            self.send_json(writer, 200, {"id": cid, "object": "x", "model": self.model,
                                         "choices": [choice], "usage": {
                                             "prompt_tokens": prompt_tokens,
                                             "completion_tokens": max_tokens,
                                             "total_tokens": prompt_tokens + max_tokens}},
                           extra=f"x-request-id: {rid}\r\n")
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\nx-request-id: " + rid.encode() + b"\r\n\r\n"
        )
        if fault == "hang":
            await asyncio.sleep(30)
            writer.transport.abort()
            return False
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        log = self.timing.setdefault(rid, []) if self.args.log_timing else None
        tail = self.tails.setdefault(rid, []) if self.args.log_timing else None
        if self.args.log_timing:
            self.arrivals[rid] = arrival
        self.running += 1
        marks = [0]  # 1 while this request counts in mid_stream
        try:
            ok = await self.stream(writer, chat, cid, max_tokens, prompt_tokens, include_usage,
                                   arrival, fault, log, tail, marks)
        finally:
            self.running -= 1
            self.mid_stream -= marks[0]
        self.completed += 1
        return ok

    def event(self, chat: bool, cid: str, text: str | None, finish: str | None) -> bytes:
        fin = "null" if finish is None else f'"{finish}"'
        if chat:
            delta = "{}" if text is None else json.dumps({"content": text})
            body = (f'{{"id":"{cid}","object":"chat.completion.chunk","created":0,"model":"{self.model}",'
                    f'"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{fin}}}]}}')
        else:
            body = (f'{{"id":"{cid}","object":"text_completion","created":0,"model":"{self.model}",'
                    f'"choices":[{{"index":0,"text":{json.dumps(text or "")},"logprobs":null,'
                    f'"finish_reason":{fin},"stop_reason":null}}]}}')
        return self.frame(b"data: " + body.encode() + b"\n\n")

    @staticmethod
    def frame(payload: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(payload), payload)

    async def stream(self, writer: asyncio.StreamWriter, chat: bool, cid: str, max_tokens: int,
                     prompt_tokens: int, include_usage: bool, arrival: int, fault: str | None,
                     log: list[int] | None, tail: list[int | None] | None,
                     marks: list[int] | None = None) -> bool:
        transport = writer.transport
        token_event = self.event(chat, cid, TOKEN_TEXT, None)
        if chat:
            transport.write(self.frame(b'data: {"id":"' + cid.encode() +
                                       b'","object":"chat.completion.chunk","choices":[{"index":0,'
                                       b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'))
        fault_k = max_tokens // 2 if fault else -1
        k = 0
        while k < max_tokens:
            end = await self.next_write(arrival, k, max_tokens, fault_k)
            if k == fault_k:
                if fault == "truncate":
                    transport.abort()
                    return False
                if fault == "malformed":
                    transport.write(self.frame(b"data: {not json\n\n"))
                if fault == "badutf8":
                    transport.write(self.frame(b'data: {"id":"x","choices":[{"index":0,"text":"\xff\xfe"}]}\n\n'))
                if fault == "error_event":
                    transport.write(self.frame(b'data: {"error":{"message":"engine died","code":500}}\n\n'))
                    transport.write(b"0\r\n\r\n")
                    return True
            if log is not None:
                log.extend([time.monotonic_ns()] * (end - k))
            transport.write(token_event * (end - k))
            k = end
            if marks is not None and not marks[0] and 3 <= k < max_tokens:
                marks[0] = 1
                self.mid_stream += 1
            if transport.get_write_buffer_size() > 1 << 20:
                await writer.drain()
        if marks is not None and marks[0]:  # every token sent: no longer mid-stream
            marks[0] = 0
            self.mid_stream -= 1
        if tail is not None:  # logged before each write, as the content events are
            tail.append(time.monotonic_ns())
        transport.write(self.event(chat, cid, None if chat else "", "length"))
        if self.tail_ns:
            await asyncio.sleep(self.tail_ns / 1e9)
        usage_at = None
        if include_usage:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                     "total_tokens": prompt_tokens + max_tokens}
            usage_at = time.monotonic_ns()
            transport.write(self.frame(
                f'data: {{"id":"{cid}","object":"x","model":"{self.model}","choices":[],'
                f'"usage":{json.dumps(usage)}}}\n\n'.encode()))
        if tail is not None:
            tail += [usage_at, time.monotonic_ns()]
        transport.write(self.frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return True

    async def next_write(self, arrival: int, k: int, max_tokens: int, fault_k: int) -> int:
        """Wait for the next write starting at event `k`; return the end (exclusive) of the
        events it carries: a burst, when its last event is due, plus any further whole bursts
        already due (a late wake-up catches up in one write). A fault goes between writes."""
        burst = self.args.burst
        limit = fault_k if k < fault_k else max_tokens
        if not (self.ttft_ns or self.itl_ns):  # as fast as the socket takes them
            if k % burst == 0:
                await asyncio.sleep(0)
            return min(k + 1, limit)

        def due(j: int) -> int:  # when event j is due
            return arrival + self.ttft_ns + j * self.itl_ns

        end = min(limit, (k // burst + 1) * burst)
        delay = (due(end - 1) - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        now = time.monotonic_ns()
        while end < limit and due(min(limit, end + burst) - 1) <= now:
            end = min(limit, end + burst)
        return end


async def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--model", default="test-model")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=0.0)
    p.add_argument("--burst", type=int, default=1,
                   help="events per write, written when the last is due (zero-delay mode: between yields)")
    p.add_argument("--tail-ms", type=float, default=0.0, help="delay of usage and [DONE] after the finish event")
    p.add_argument("--api-key", default=None)
    p.add_argument("--faults", default="")
    p.add_argument("--log-timing", action="store_true")
    p.add_argument("--tokenize", action="store_true", help="answer POST /tokenize (vLLM's shape)")
    p.add_argument("--tokenize-delay-ms", type=float, default=0.0,
                   help="delay each /tokenize answer by a random 0..N ms")
    args = p.parse_args(argv)
    server = Server(args)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", args.port, limit=1 << 20, backlog=1024)
    port = srv.sockets[0].getsockname()[1]
    print(f"INFO: serving on http://127.0.0.1:{port}", flush=True)
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
