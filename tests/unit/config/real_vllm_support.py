"""A real vLLM 0.32.0 CPU server's start-up log and live answers (tests/fixtures/real_vllm),
served again on 127.0.0.1 so a test captures "the live endpoint" as `infbench config capture
URL` does, and edits of that log standing in for the same server restarted with other flags."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.unit.config.test_endpoint import serve

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real_vllm"
LOG = REAL / "vllm-0.32.0-cpu-startup.log"
METRICS = REAL / "vllm-0.32.0-cpu-metrics.txt"
CACHE_INFO = "vllm:cache_config_info{"


def log_text() -> str:
    return LOG.read_text(encoding="utf-8")


@contextmanager
def live(metrics: str | None = None, models: str | None = None) -> Iterator[str]:
    """The server's /v1/models, /version and /metrics as it answered them (or edited)."""
    routes = {"/v1/models": (200, models or (REAL / "vllm-0.32.0-cpu-models.json").read_text()),
              "/version": (200, (REAL / "vllm-0.32.0-cpu-version.json").read_text()),
              "/metrics": (200, metrics or METRICS.read_text())}
    with serve(routes) as url:
        yield url


def replace_once(text: str, old: str, new: str) -> str:
    """One edit, on a line that is there exactly once (so a changed fixture fails loudly)."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def restarted(text: str, args: dict[str, object], engine: dict[str, str] | None = None) -> str:
    """The log of the same server started with more flags: vLLM 0.32.0 prints them in its
    `non-default args` dict (a Python repr, appended before the closing brace), and a flag the
    engine config line prints also changes there (`name=old` -> `name=new`). Nothing else of
    the log is touched: lines a flag would change later (KV sizes) are kept as they were, so a
    flag whose effect shows there must not be chosen, nor one the dict already holds."""
    old = "'served_model_name': ['tiny-llama']}"
    assert not any(f"'{k}':" in text for k in args)
    extra = "".join(f", {k!r}: {v!r}" for k, v in args.items())
    text = replace_once(text, old, old[:-1] + extra + "}")
    for before, after in (engine or {}).items():
        text = replace_once(text, f", {before},", f", {after},")
    return text


def metrics_with(**labels: str) -> str:
    """The real /metrics with some `vllm:cache_config_info` labels given other values."""
    text = METRICS.read_text()
    line = next(x for x in text.splitlines() if x.startswith(CACHE_INFO))
    edited = line
    for name, value in labels.items():
        edited, n = re.subn(rf'(?<=[{{,]){name}="[^"]*"', f'{name}="{value}"', edited)
        assert n == 1, f"label {name} occurs {n} times"
    return text.replace(line, edited)


def models_with(max_model_len: int) -> str:
    doc = json.loads((REAL / "vllm-0.32.0-cpu-models.json").read_text())
    doc["data"][0]["max_model_len"] = max_model_len
    return json.dumps(doc)
