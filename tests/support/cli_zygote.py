"""A fork server for the test suite's `infbench` subprocesses.

Every e2e test runs the real CLI in its own process; most of what such a process costs on a
2-CPU CI machine is importing the CLI's stack (aiohttp, DuckDB, NumPy, the load generator:
~1.5 s of CPU for `infbench run`), paid again by each of the suite's hundreds of calls.
This server imports that stack once, then forks one child per call: the child is a fresh
process as `python -m infbench ARGS` would be (its own pid, cwd, environment, argv, stdio,
exit status, signals, atexit handlers and interpreter shutdown), only without re-importing.

What a fork shares that a fresh interpreter would not, and what is done about it:
- random state: `random` and NumPy's global generator are reseeded from the OS in the child;
- signal handlers and the wake-up fd the server uses: reset to the defaults in the child;
- the hash seed of str (PYTHONHASHSEED): one per server, as in one process; nothing in the
  CLI may depend on set order across processes, and nothing does.
Environment read at import time would be the server's: the CLI reads its environment when
a command runs (a unit test checks that no module reads it at import).

Protocol (one Unix-socket connection per call): the client sends one JSON line
{argv, env, cwd, stdout, stderr} (two file paths the child writes; `module`, what
`python -m` runs, is infbench unless a test of this server says otherwise), the server answers
"pid N" once forked and "status S" once the child exited (S as subprocess's returncode:
negative for a signal). The server is single-threaded (it must be, to fork safely) and
serves calls concurrently: children are reaped on SIGCHLD.

Run as `python -m tests.support.cli_zygote SOCKET_PATH`; it prints "ready" when it listens.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys


def preload() -> None:
    import infbench.cli as cli

    for lazy in cli.COMMANDS:
        importlib.import_module(lazy.module)


def child(request: dict, inherited: list[socket.socket], fds: list[int]) -> None:
    """Become `python -m infbench ARGV`. Never returns: the module's SystemExit (or an
    exception) ends this process through the interpreter's normal shutdown."""
    signal.set_wakeup_fd(-1)
    # What a fresh interpreter starts with: KeyboardInterrupt on SIGINT, SIGPIPE ignored.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    for sock in inherited:
        sock.close()
    for fd in fds:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import random

    import numpy as np

    random.seed()
    np.random.seed()
    module = request.get("module", "infbench")
    sys.argv = [module, *request["argv"]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd is written
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    running: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in sel.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                line = b""
                while not line.endswith(b"\n"):
                    part = conn.recv(65536)
                    if not part:
                        break
                    line += part
                if not line.endswith(b"\n"):
                    conn.close()
                    continue
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    child(request, [listener, conn, *running.values()], [wake_r, wake_w])
                running[pid] = conn
                conn.sendall(f"pid {pid}\n".encode())
            else:
                os.read(wake_r, 4096)
                reap(running)


def reap(running: dict[int, socket.socket]) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = running.pop(pid, None)
        if conn is None:
            continue
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        with contextlib.suppress(OSError):  # the client may have given up on this call
            conn.sendall(f"status {code}\n".encode())
        conn.close()


if __name__ == "__main__":
    preload()
    serve(sys.argv[1])
