"""Command line: `python -m reference_engine [flags]` (also `infbench engine serve`).

Flags are named like vLLM's where the meaning is the same. Only flags given on the command
line reach `EngineConfig`, so its defaults stay the single source of truth and
`/engine/config` can say truthfully which settings are defaults.

Once the socket is bound, exactly one line goes to stdout so launchers can find the port:
`INFO: serving on http://HOST:PORT`. Everything else is logged to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

from aiohttp import web

from reference_engine import startup_log
from reference_engine.config import REDACTED, EngineConfig
from reference_engine.faults import FAULT_EXAMPLES

log = logging.getLogger("reference_engine")
API_KEY_ENV = "VLLM_API_KEY"  # same variable vLLM reads, so keys need not sit in `ps` output
PROFILER_DIR_ENV = "VLLM_TORCH_PROFILER_DIR"  # vLLM's switch for its profiling endpoints


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reference_engine", argument_default=argparse.SUPPRESS,
        description="Serve the reference engine over an OpenAI-compatible HTTP API.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="fault examples (--fault, repeatable):\n"
               + "\n".join(f"  --fault {e}" for e in FAULT_EXAMPLES))
    add = p.add_argument
    add("--executor", choices=["sim", "torch"], help="sim: roofline-timed, no tensors; "
        "torch: tiny random-weight Llama (default sim)")
    add("--model", help="model name for the roofline and memory plan, or a config.json path")
    add("--served-model-name", help="name clients must send as 'model' (default: --model)")
    add("--gpu", help="GPU whose roofline the sim executor follows (default H100-SXM)")
    add("--device", help="torch executor device: cpu, cuda or auto")
    add("--dtype", help="weight format (bf16, fp16, fp8)")
    add("--kv-cache-dtype", help="KV cache format (auto follows --dtype)")
    add("--tensor-parallel-size", "-tp", type=int)
    add("--block-size", type=int, help="tokens per KV block")
    add("--gpu-memory-utilization", type=float, help="fraction of GPU memory to use")
    add("--num-gpu-blocks", "--num-gpu-blocks-override", dest="num_gpu_blocks", type=int,
        help="KV pool size in blocks, overriding the memory plan")
    add("--max-num-seqs", type=int)
    add("--max-num-batched-tokens", type=int, help="per-step token budget")
    add("--max-model-len", type=int)
    add("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    add("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    add("--metrics-names", choices=["vllm", "vllm-legacy", "sglang"], help="/metrics under "
        "vLLM's names (default), the names vLLM used before its 0.9-0.11 renames "
        "(gpu_cache_usage_perc, gpu_prefix_cache_*, time_per_output_token_seconds), or "
        "SGLang's (sglang:*, its bucket edges), for dashboards built for any of them")
    add("--api-key", help=f"require 'Authorization: Bearer KEY' on /v1/ (or set {API_KEY_ENV})")
    add("--fault", dest="faults", action="append", metavar="SPEC",
        help="inject a fault: KIND:FIELD=VALUE,... (repeatable; examples below)")
    add("--host", help="address to bind (default 127.0.0.1)")
    add("--port", type=int, help="port to bind; 0 picks a free one (default 8000)")
    add("--seed", type=int)
    add("--step-overhead-ms", type=float, help="sim: fixed cost added to every step")
    add("--sim-eos-probability", type=float, help="sim: chance a synthetic token is EOS")
    add("--sim-output-median", type=int,
        help="sim: median natural answer length in tokens (EOS there unless ignore_eos; "
             "lognormal, at least 16); 0 = generate to max_tokens (default 192)")
    add("--sim-output-sigma", type=float, help="sim: spread of the answer length (default 0.7)")
    add("--sim-copy-probability", type=float, help="sim: chance a greedy token continues what "
        "followed its last 3 tokens earlier in the context (what n-gram drafts hit; default 0)")
    add("--speculative-config", type=_json_object, metavar="JSON", help="speculative decoding, "
        'as vLLM\'s: \'{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}\'')
    add("--enable-lora", action=argparse.BooleanOptionalAction,
        help="serve LoRA adapters (sim executor): requests name one by 'model'")
    add("--max-loras", type=int, help="distinct adapters a batch may hold; requests of other "
        "adapters wait for a slot (vLLM's default 1)")
    add("--max-lora-rank", type=int, help="largest adapter rank served (default 16)")
    add("--lora-modules", nargs="+", metavar="NAME=PATH", help="adapters to serve, each a "
        "directory with peft's adapter_config.json (its rank 'r' is what the sim prices)")
    add("--sim-lora-launch-us", type=float, help="sim: fixed cost per adapter in a step, per "
        "layer, beside its shrink/expand FLOPs and weight reads (default 3)")
    add("--grammar-compile-base-ms", type=float,
        help="structured output: fixed cost of compiling a cold schema (default 5)")
    add("--grammar-compile-ms-per-kib", type=float,
        help="structured output: compile cost per KiB of the schema's JSON (default 40)")
    add("--grammar-compile-workers", type=int,
        help="structured output: compiles that run at once (default 2)")
    add("--grammar-cache-size", type=int,
        help="structured output: compiled schemas kept, least recently used evicted; 0 = no "
             "cache (default 64)")
    add("--grammar-mask-us-per-seq", type=float,
        help="structured output: cost of one sequence's token mask per step (default 40)")
    add("--grammar-mask-overlap", action=argparse.BooleanOptionalAction,
        help="structured output: fill the token masks while the forward pass runs (vLLM's "
             "default); --no-grammar-mask-overlap makes every step wait for them")
    add("--defaults", help="default set (the engine's 'version'): builtin, ref-1, ref-2, or a .toml "
        "file with a [defaults] table; flags given override it (default builtin)")
    add("--enforce-eager", action=argparse.BooleanOptionalAction,
        help="sim: no CUDA graphs, every decode step pays the launch overhead")
    add("--cudagraph-mode", choices=["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY",
                                     "FULL_AND_PIECEWISE"], help="sim: which decode steps replay a graph")
    add("--cudagraph-capture-sizes", type=_int_list, metavar="N,N,...",
        help="sim: decode batch sizes captured (a batch is padded up to the next one)")
    add("--cudagraph-max-capture-size", type=int,
        help="sim: largest captured batch; larger ones run eagerly (default min(2*max_num_seqs, 512))")
    add("--async-scheduling", action=argparse.BooleanOptionalAction,
        help="sim: hide the per-step host overhead behind the device step")
    add("--stream-interval", type=int, help="tokens per streamed event (default 1)")
    add("--scheduling-policy", choices=["fcfs", "priority", "fair"],
        help="admission order: fcfs, priority (the request's 'priority', lower first), or fair "
             "(token-weighted fair share across tenants, the request's 'user': the tenant "
             "charged least for its work on the roofline goes first)")
    add("--tenant-weights", type=_tenant_weights, metavar="NAME=W,...",
        help="fair policy: each tenant's weight, e.g. docs=1,chat=2 (a tenant not named has 1)")
    add("--step-log-size", type=int, help="per-step records kept for /engine/steps")
    add("--stream-byte-budget", type=int,
        help="bytes a streaming client may fall behind before its request is cancelled")
    add("--profile-dir", help=f"write PyTorch-profiler traces here on POST /stop_profile (or set "
        f"{PROFILER_DIR_ENV}); torch: real trace, sim: synthetic trace of the timed steps")
    add("--profile-steps", metavar="START:COUNT",
        help="profile steps START..START+COUNT-1 without the endpoints (needs --profile-dir)")
    add("--dump-dir", help="tensor parallel: each rank writes its collective log (Flight "
        "Recorder pickle) to DIR/rank_<R> on a watchdog timeout and on POST "
        "/debug/flight_recorder/dump")
    add("--collective-timeout-s", type=float, help="tensor parallel: a collective running "
        "longer marks the engine unhealthy and dumps every rank's log (default 30)")
    add("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def _tenant_weights(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in text.split(","):
        name, eq, value = part.strip().partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = float("nan")
        if not eq or not name.strip() or not 0.0 < weight < float("inf"):
            raise argparse.ArgumentTypeError(
                f"expected NAME=WEIGHT pairs with weights > 0, like docs=1,chat=2; got {part!r}")
        out[name.strip()] = weight
    return out


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").strip("[]").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,2,4,8, got {text!r}") from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if k != "log_level"}
    if "api_key" not in given and os.environ.get(API_KEY_ENV):
        given["api_key"] = os.environ[API_KEY_ENV]
    if "profile_dir" not in given and os.environ.get(PROFILER_DIR_ENV):
        given["profile_dir"] = os.environ[PROFILER_DIR_ENV]
    return EngineConfig.with_defaults(given.pop("defaults", "builtin"), **given)


def bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(512)
    sock.setblocking(False)
    return sock


async def serve(config: EngineConfig) -> None:
    from reference_engine.engine import Engine
    from reference_engine.server import create_app

    try:
        engine = Engine(config)
    except ValueError:
        startup_log.log_failed(config)
        raise
    startup_log.log_started(engine.executor, config, engine.pool.num_blocks)
    engine.start()
    runner = web.AppRunner(create_app(engine, config), handler_cancellation=True,
                           access_log=None)
    try:
        await runner.setup()
        sock = bind(config.host, config.port)
        await web.SockSite(runner, sock, shutdown_timeout=2.0).start()
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"INFO: serving on http://{shown}:{port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down")
    finally:
        await runner.cleanup()
        engine.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(levelname)s: %(message)s")
    try:
        config = config_from_args(args)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shown = {k: (REDACTED if k == "api_key" else v) for k, v in vars(args).items()
             if k != "log_level"}
    log.info("non-default args: %s", shown)
    log.info("%s", config.vllm_config_line())
    startup_log.configure(args.log_level)
    try:
        asyncio.run(serve(config))
    except (ValueError, OSError) as exc:
        # Bad model/GPU names, a pool that cannot fit, a port in use: one line, not a trace.
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
