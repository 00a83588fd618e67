"""Capture from running servers: the reference engine's /engine/config, and what a vLLM
server exposes (/v1/models max_model_len, /version, the vllm:cache_config_info gauge)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest

from infbench.config.endpoint import capture_url
from infbench.config.model import CaptureError
from tests.support.http_stub import StubServer

VLLM_METRICS = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="fp8",calculate_kv_scales="False",'
    'enable_prefix_caching="True",gpu_memory_utilization="0.85",num_gpu_blocks="27000",'
    'num_gpu_blocks_override="None",swap_space_bytes="4294967296"} 1.0\n'
    "vllm:num_requests_running{model_name=\"m\"} 0.0\n")


@contextmanager
def serve(routes: dict[str, tuple[int, str]]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            status, body = routes.get(self.path, (404, ""))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    httpd = StubServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_vllm_server_is_captured_from_models_version_and_metrics() -> None:
    models = {"data": [{"id": "llama", "root": "meta-llama/Llama-3.1-8B", "owned_by": "vllm",
                        "max_model_len": 32768}]}
    with serve({"/v1/models": (200, json.dumps(models)), "/version": (200, '{"version": "0.11.0"}'),
                "/metrics": (200, VLLM_METRICS)}) as url:
        c = capture_url(url)
    assert (c.engine, c.version, c.source_kind) == ("vllm", "0.11.0", "live_endpoint")
    assert c.values() == {"block_size": 16, "kv_cache_dtype": "fp8", "calculate_kv_scales": False,
                          "enable_prefix_caching": True, "gpu_memory_utilization": 0.85,
                          "num_gpu_blocks": 27000, "swap_space": 4.0,  # GiB, as the flag takes it
                          "max_model_len": 32768, "model": "meta-llama/Llama-3.1-8B",
                          "served_model_name": "llama"}
    assert c.settings["kv_cache_dtype"].raw_key == "vllm:cache_config_info.cache_dtype"


def test_the_reference_engines_config_document_gives_exact_origins() -> None:
    doc = {"max_num_seqs": {"value": 64, "default": False}, "block_size": {"value": 16, "default": True},
           "defaults": {"value": "ref-2", "default": False}}
    with serve({"/engine/config": (200, json.dumps(doc))}) as url:
        c = capture_url(url + "/")
    assert (c.engine, c.version) == ("reference", "ref-2")
    assert c.settings["max_num_seqs"].origin == "set" and c.settings["block_size"].origin == "default"


def test_servers_that_are_not_openai_compatible_are_refused() -> None:
    with serve({}) as url, pytest.raises(CaptureError, match="HTTP 404"):
        capture_url(url)
    with pytest.raises(CaptureError, match="cannot connect"):
        capture_url("http://127.0.0.1:9")
