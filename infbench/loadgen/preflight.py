"""Checks before any load: the URL answers, the key is accepted, the model exists, the
endpoint streams; and a token calibration for prompt lengths (`loadgen.calibrate`). Each
failure is one line."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import aiohttp

from infbench.loadgen.calibrate import Counter, calibrate, tokenize_count
from infbench.loadgen.http.bodies import ENDPOINTS, auth_headers, redact
from infbench.loadgen.workloads.prompts import TokenModel, random_words


class PreflightError(Exception):
    """The target cannot be benchmarked as asked; the message is one line."""


@dataclass
class Target:
    url: str
    model: str
    models: list[str]
    tokens: TokenModel
    ignore_eos_supported: bool
    metrics_url: str | None
    steps_url: str | None
    steps_after: int = -1  # engine steps up to this id happened before the run
    # The target's own resolved settings ({name: {"value", "default"}}) where it serves them
    # (the reference engine's /engine/config); playbooks read model, GPU and budgets from it.
    engine_config: dict[str, Any] | None = None
    # Whether the target answers vLLM's POST /tokenize (then prompts are sized exactly), and
    # the longest prompt plus output it takes, where it says (/v1/models, /tokenize).
    tokenize: bool = False
    max_model_len: int | None = None


def _error_message(body: str) -> str:
    try:
        obj = json.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        msg = err.get("message") if isinstance(err, dict) else None
        return str(msg or body)[:200].replace("\n", " ")
    except ValueError:
        return body[:200].replace("\n", " ")


async def _get(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[int, str]:
    async with session.get(url, headers=headers) as r:
        return r.status, await r.text(errors="replace")


async def _probe(session: aiohttp.ClientSession, url: str, endpoint: str, model: str, words: int,
                 headers: dict[str, str], ignore_eos: bool, seed: int) -> tuple[int, dict[str, Any] | str]:
    import numpy as np

    text = random_words(np.random.default_rng(seed), words)
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "temperature": 0.0}
    if ignore_eos:
        body["ignore_eos"] = True
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    async with session.post(url + ENDPOINTS[endpoint], json=body, headers=headers) as r:
        raw = await r.text(errors="replace")
        if r.status != 200:
            return r.status, raw
        try:
            return 200, json.loads(raw)
        except ValueError:
            return 200, raw


async def preflight(url: str, endpoint: str, model: str | None, api_key: str | None,
                    metrics_url: str | None = None, timeout_s: float = 10.0) -> Target:
    headers = auth_headers(api_key)
    check_url(url)
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            return await _preflight(session, url, endpoint, model, api_key, headers, metrics_url)
    except aiohttp.ClientConnectorError as exc:
        why = exc.os_error.strerror or str(exc.os_error)
        raise PreflightError(f"cannot reach {url}: {why}") from None
    except ConnectionError as exc:
        raise PreflightError(f"cannot reach {url}: {exc.strerror or exc}") from None
    except (TimeoutError, aiohttp.ServerTimeoutError):
        raise PreflightError(f"{url} did not answer within {timeout_s:.0f}s") from None
    except aiohttp.ServerDisconnectedError:
        raise PreflightError(f"{url} closed the connection without answering: is it an HTTP "
                             "server (and not HTTPS, or another protocol, on that port)?") from None
    except aiohttp.ClientResponseError as exc:
        raise PreflightError(f"{url} sent a response that is not valid HTTP ({exc.message})") from None
    except aiohttp.ClientError as exc:
        detail = str(exc).splitlines()[0] if str(exc) else "no detail"
        raise PreflightError(f"cannot talk to {url}: {detail}") from None


def check_url(url: str) -> None:
    """A base URL the client can use: http(s), a host, no query. Says what to type instead."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        hint = f" (did you mean http://{url}?)" if "://" not in url else ""
        raise PreflightError(f"url: {url!r} is not an http:// or https:// URL{hint}")
    if not parts.hostname:
        raise PreflightError(f"url: {url!r} has no host")
    if parts.query or parts.fragment:
        raise PreflightError(f"url: {url!r}: give the server's base URL, without ?query or #fragment")


async def _preflight(session: aiohttp.ClientSession, url: str, endpoint: str, model: str | None,
                     api_key: str | None, headers: dict[str, str], metrics_url: str | None) -> Target:
    status, body = await _get(session, url + "/v1/models", headers)
    if status in (401, 403):
        what = "the API key was rejected" if api_key else "it needs an API key (--api-key or OPENAI_API_KEY)"
        raise PreflightError(f"{url}: HTTP {status}, {what}: {redact(_error_message(body), api_key)}")
    models: list[str] = []
    limits: dict[str, int] = {}
    listed = False
    if status == 200:
        try:
            cards = [m for m in json.loads(body).get("data", []) if isinstance(m, dict) and "id" in m]
            models = [m["id"] for m in cards]
            limits = {m["id"]: m["max_model_len"] for m in cards if isinstance(m.get("max_model_len"), int)}
            listed = True
        except (ValueError, AttributeError):
            models = []
    if model is None:
        if status == 200 and not listed:
            start = (redact(body, api_key) or "").strip().replace("\n", " ")[:80]
            raise PreflightError(f"{url}/v1/models answered HTTP 200 but not with a JSON model list "
                                 f"(it began {start!r}): is this an OpenAI-compatible server?")
        if not models:
            raise PreflightError(f"{url}/v1/models lists no model (HTTP {status}); pass --model")
        model = models[0]
    elif models and model not in models:
        raise PreflightError(f"model {model!r} is not served by {url} (it serves: {', '.join(models)})")

    ignore_eos = True
    short = 16
    st, res = await _probe(session, url, endpoint, model, short, headers, True, 1)
    if st == 400 and "ignore_eos" in str(res):
        ignore_eos = False
        st, res = await _probe(session, url, endpoint, model, short, headers, False, 1)
    if st in (401, 403):
        raise PreflightError(f"{url}: HTTP {st}, the API key was rejected: {redact(_error_message(str(res)), api_key)}")
    if st == 404:
        raise PreflightError(f"{url}{ENDPOINTS[endpoint]}: HTTP 404: {redact(_error_message(str(res)), api_key)}")
    if st == 200 and not isinstance(res, dict):
        start = (redact(str(res), api_key) or "").strip().replace("\n", " ")[:80]
        raise PreflightError(
            f"{url}{ENDPOINTS[endpoint]} answered a 1-token test request with HTTP 200 but not with "
            f"a JSON completion (it began {start!r}): is this an OpenAI-compatible server, "
            "and is --endpoint right?")
    if st != 200:
        raise PreflightError(f"{url}{ENDPOINTS[endpoint]} refused a 1-token test request with "
                             f"HTTP {st}: {redact(_error_message(str(res)), api_key)}")
    # /tokenize is vLLM's, outside /v1; a target without it answers 404 and is calibrated
    # from the usage of probe requests instead.
    tokenize = isinstance(await tokenize_count(session, url, model, headers, {"prompt": "the"}), int)
    counter = Counter(session, url, endpoint, model, headers, tokenize=tokenize, ignore_eos=ignore_eos)
    tokens = await calibrate(counter, limits.get(model))

    if metrics_url is None:
        try:
            mst, _ = await _get(session, url + "/metrics", headers)
            metrics_url = url + "/metrics" if mst == 200 else None
        except aiohttp.ClientError:
            metrics_url = None
    steps_url, steps_after = None, -1
    try:
        sst, sbody = await _get(session, url + "/engine/steps?after=-1", headers)
        if sst == 200:
            steps_url = url + "/engine/steps"
            data = json.loads(sbody)
            steps = data.get("steps", []) if isinstance(data, dict) else data
            ids = [int(s["step_id"]) for s in steps if isinstance(s, dict) and "step_id" in s]
            steps_after = max(ids, default=-1)
    except (aiohttp.ClientError, ValueError, TypeError):
        steps_url = None
    engine_config = None
    try:
        cst, cbody = await _get(session, url + "/engine/config", headers)
        doc = json.loads(cbody) if cst == 200 else None
        engine_config = doc if isinstance(doc, dict) else None
    except (aiohttp.ClientError, ValueError):
        engine_config = None
    return Target(url=url, model=model, models=models, tokens=tokens, ignore_eos_supported=ignore_eos,
                  metrics_url=metrics_url, steps_url=steps_url, steps_after=steps_after,
                  engine_config=engine_config, tokenize=tokenize, max_model_len=limits.get(model))
