"""Reads are stamped with when the data arrived, not when the client got round to reading it."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from infbench.loadgen.http.client import stamped_socket


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel receive stamps are Linux-only")
def test_stamp_is_the_arrival_not_the_read() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    info = socket.getaddrinfo("127.0.0.1", listener.getsockname()[1], type=socket.SOCK_STREAM)[0]
    client = stamped_socket(info)
    try:
        client.connect(info[4])
        server, _ = listener.accept()
        # The kernel switches stamping on lazily: the first packets may come without a stamp
        # (then the socket reports none and the client falls back to its own clock).
        for _ in range(50):
            server.sendall(b":\n\n")
            time.sleep(0.002)
            client.recv(4096)
            if client.rx_ns:
                break
        before = time.monotonic_ns()
        server.sendall(b"data: x\n\n")
        sent = time.monotonic_ns()
        time.sleep(0.02)  # the client is busy elsewhere; the bytes wait in the kernel
        read_at = time.monotonic_ns()
        assert client.recv(4096) == b"data: x\n\n"
        assert before <= client.rx_ns <= sent < read_at
        server.close()
    finally:
        client.close()
        listener.close()
