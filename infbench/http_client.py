"""HTTP off the load hot path, through httpx: a Prometheus query, an engine's /metrics page or
/engine/config, a rank list, a health poll. One request at a time with one timeout, TLS
verified against the system's trust store (or a CA file, or not at all when asked), and a
failure to get any answer classified by kind so each caller says it in its own words.

The load itself does not come here: `infbench/loadgen/http1*.py` is a hand-written client
whose cost per request a benchmark justifies.

Secrets: a caller passes a token or key only as a header; nothing here puts it in a URL, a
message or a return value. A redirect to another host drops the Authorization header
(httpx's rule), so a token is not handed to a host it was not meant for.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import httpx

# Why no answer came: the kinds a caller tells apart.
TIMEOUT = "timeout"          # no answer within the timeout
TLS = "tls"                  # certificate or handshake failure
UNREACHABLE = "unreachable"  # refused, DNS, reset, cut off mid-answer, a URL httpx cannot use


class NoAnswer(Exception):
    """No HTTP answer at all (a status, even 500, is an answer); `kind` is one of the above,
    the message says why without the URL (the caller names what it asked)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    reason: str        # the status's phrase ("Not Found"), for messages
    cut: bool = False  # the body was longer than the limit asked for


@lru_cache(maxsize=1)
def _system_trust() -> ssl.SSLContext:
    # The system's trust store, as urllib used; built once (loading it costs milliseconds).
    return ssl.create_default_context()


def tls_context(ca_file: str | Path | None = None, insecure: bool = False) -> ssl.SSLContext:
    """The TLS verification of a request: the system's trust store; a CA file instead; or,
    when asked (`insecure`), none. OSError or ssl.SSLError for a CA file that cannot be read."""
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if ca_file:
        return ssl.create_default_context(cafile=str(ca_file))
    return _system_trust()


def _why(exc: BaseException) -> tuple[str, str]:
    """(kind, reason) for an httpx failure: the innermost cause names it best."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError | ssl.CertificateError):
            return TLS, str(cause)
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.TimeoutException):
        return TIMEOUT, str(exc) or "timed out"
    return UNREACHABLE, str(exc) or type(exc).__name__


def request(method: str, url: str, *, timeout_s: float, headers: dict[str, str] | None = None,
            content: bytes | None = None, verify: ssl.SSLContext | None = None,
            limit: int | None = None) -> Answer:
    """One request; the answer whatever its status (at most `limit` bytes of body when given,
    `cut` saying whether there was more). Redirects are followed, as urllib did. Raises
    NoAnswer when no answer came."""
    try:
        with httpx.Client(verify=verify or _system_trust(), timeout=timeout_s,
                          follow_redirects=True) as client, \
                client.stream(method, url, headers=headers, content=content) as resp:
            if limit is None:
                return Answer(resp.status_code, resp.read(), resp.reason_phrase)
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > limit:
                    break
            return Answer(resp.status_code, bytes(body[:limit]), resp.reason_phrase,
                          cut=len(body) > limit)
    except (httpx.HTTPError, httpx.InvalidURL, ssl.SSLError, OSError) as exc:
        kind, reason = _why(exc)
        raise NoAnswer(kind, reason) from None
