"""HTTP off the load hot path (`infbench.http_client`) against peers that answer well and
badly: any status is an answer, no answer is classified (timeout, TLS, unreachable), a body
is cut at its limit, and a token given as a header goes to no other host on a redirect."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from infbench.http_client import TIMEOUT, TLS, UNREACHABLE, NoAnswer, request
from tests.support.http_stub import QuietHandler, serve


class Handler(QuietHandler):
    body: bytes = b""
    status: int = 200
    delay_s: float = 0.0
    location: str = ""
    seen: list[tuple[str, str, str, bytes]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        sent = self.rfile.read(length) if length else b""
        type(self).seen.append((self.command, self.path, self.headers.get("Authorization", ""), sent))
        time.sleep(self.delay_s)
        if self.location:
            self.send_response(302)
            self.send_header("Location", self.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = _answer


@pytest.fixture
def peer() -> Iterator[tuple[str, type[Handler]]]:
    with serve(Handler, seen=[]) as url_and_handler:
        yield url_and_handler


@pytest.mark.parametrize("status, body", [(200, b"ok"), (204, b""), (404, b"nope"),
                                          (503, b"<html>down</html>")])
def test_any_status_is_an_answer(peer: tuple[str, type[Handler]], status: int, body: bytes) -> None:
    url, h = peer
    h.status, h.body = status, body
    a = request("GET", url + "/x?q=1", timeout_s=2)
    assert (a.status, a.body, a.cut) == (status, body, False)
    assert h.seen[-1][:2] == ("GET", "/x?q=1")


def test_a_post_sends_its_body_and_headers(peer: tuple[str, type[Handler]]) -> None:
    url, h = peer
    request("POST", url + "/api", timeout_s=2, content=b"query=up&step=2",
            headers={"Authorization": "Bearer tok-9"})
    assert h.seen[-1] == ("POST", "/api", "Bearer tok-9", b"query=up&step=2")


@pytest.mark.parametrize("size, limit, cut", [(10, 4, True), (4096, 4095, True),
                                              (4096, 4096, False), (100_000, 70_000, True),
                                              (3, 100, False)])
def test_a_body_is_cut_at_its_limit(peer: tuple[str, type[Handler]], size: int, limit: int,
                                    cut: bool) -> None:
    url, h = peer
    h.body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    a = request("GET", url, timeout_s=2, limit=limit)
    assert a.body == h.body[:limit] and a.cut is cut


def test_no_answer_is_classified(peer: tuple[str, type[Handler]]) -> None:
    url, h = peer
    h.delay_s = 1.0
    t = time.monotonic()
    with pytest.raises(NoAnswer) as err:
        request("GET", url, timeout_s=0.25)
    assert err.value.kind == TIMEOUT and time.monotonic() - t < 0.9
    with pytest.raises(NoAnswer) as err:
        request("GET", "http://127.0.0.1:1/metrics", timeout_s=2)
    assert err.value.kind == UNREACHABLE and "127.0.0.1:1" not in str(err.value)
    h.delay_s = 0.0
    with pytest.raises(NoAnswer) as err:  # plain HTTP spoken to as https: never silently
        request("GET", url.replace("http://", "https://"), timeout_s=2)
    assert err.value.kind in (TLS, UNREACHABLE)
    for bad in ("ftp://127.0.0.1/x", "http://[::1"):
        with pytest.raises(NoAnswer) as err:
            request("GET", bad, timeout_s=1)
        assert err.value.kind == UNREACHABLE


def test_a_redirect_is_followed_and_a_token_goes_to_no_other_host() -> None:
    with serve(Handler, seen=[]) as (other, o), serve(Handler, seen=[]) as (first, f):
        o.body = b"moved here"
        f.location = other + "/there"
        a = request("GET", first + "/here", timeout_s=2,
                    headers={"Authorization": "Bearer s3cret"})
        assert (a.status, a.body) == (200, b"moved here")
        assert f.seen[-1][2] == "Bearer s3cret"
        assert o.seen[-1][:3] == ("GET", "/there", "")  # another origin: the header dropped
