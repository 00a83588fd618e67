"""Each rank's Python stacks: py-spy on a live process, or text/JSON someone saved.

`py-spy dump --pid P --json` (benfred/py-spy) prints a list of threads, each with its
frames innermost first. It attaches with ptrace: where that is not allowed (not root, Yama
`ptrace_scope` >= 1 for a non-child, a container without CAP_SYS_PTRACE) it prints
"Permission Denied", and the capture says so in one line instead of guessing.

A saved stack may also be a `faulthandler` dump (`faulthandler.dump_traceback(all_threads=
True)`: "Thread 0x... (most recent call first):" then `File "f", line N in func`), which an
engine can write on a signal without ptrace; its thread id is the pthread id py-spy calls
`thread_id`, so both compare with Flight Recorder's `thread_id`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PYSPY_TIMEOUT_S = 20.0
_PERMISSION = re.compile(r"permission denied|operation not permitted|ptrace|EPERM", re.I)
_SUSPEND = re.compile(r"failed to suspend process", re.I)
_GONE = re.compile(r"no such process|check that the process is running", re.I)
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*?)\])? \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


@dataclass
class Frame:
    function: str
    filename: str
    line: int | None
    module: str | None = None


@dataclass
class Thread:
    thread_id: str | None          # pthread id, decimal
    os_thread_id: int | None
    name: str | None
    active: bool | None
    owns_gil: bool | None
    frames: list[Frame] = field(default_factory=list)   # innermost first


@dataclass
class Stacks:
    status: str                    # ok | permission_denied | failed | process_gone | not_requested
    source: str | None = None      # py-spy | faulthandler | file
    threads: list[Thread] = field(default_factory=list)
    error: str | None = None       # one line when status is not ok
    at_ns: int | None = None


def pyspy_path() -> str | None:
    """py-spy next to this interpreter (a venv's bin) first, then on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def parse_pyspy_json(text: str) -> list[Thread]:
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("py-spy JSON is a list of threads")
    threads = []
    for t in data:
        if not isinstance(t, dict) or not isinstance(t.get("frames"), list):
            raise ValueError("a py-spy thread has no frames list")
        tid = t.get("thread_id")
        threads.append(Thread(
            thread_id=str(tid) if tid is not None else None,
            os_thread_id=t.get("os_thread_id") if isinstance(t.get("os_thread_id"), int) else None,
            name=t.get("thread_name"), active=t.get("active"), owns_gil=t.get("owns_gil"),
            frames=[Frame(str(f.get("name")), str(f.get("filename")),
                          f.get("line") if isinstance(f.get("line"), int) else None,
                          f.get("module")) for f in t["frames"] if isinstance(f, dict)]))
    return threads


def parse_faulthandler(text: str) -> list[Thread]:
    """Threads of a faulthandler dump. A file a process appends to on every signal holds
    several dumps one after the other; a thread's later block replaces its earlier one, so
    each thread comes back as it was in the latest dump."""
    threads: dict[str, Thread] = {}
    current: Thread | None = None
    for line in text.splitlines():
        m = _FH_THREAD.match(line)
        if m:
            tid = str(int(m.group(2), 16))
            current = Thread(thread_id=tid, os_thread_id=None,
                             name=m.group(3) or ("current" if m.group(1) == "Current thread" else None),
                             active=None, owns_gil=m.group(1) == "Current thread")
            threads.pop(tid, None)
            threads[tid] = current
            continue
        f = _FH_FRAME.match(line)
        if f and current is not None:
            current.frames.append(Frame(f.group(3), f.group(1), int(f.group(2))))
    if not threads:
        raise ValueError("no 'Thread 0x... (most recent call first):' block")
    return list(threads.values())


def read_stacks_file(path: Path, offset: int = 0) -> Stacks:
    """A saved py-spy JSON dump or faulthandler text (from byte `offset`: what a process
    appended since); status failed with the reason if neither."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        return Stacks("failed", "file", error=f"{path}: cannot read it ({exc.strerror or exc})")
    at = int(path.stat().st_mtime_ns)
    try:
        if text.lstrip().startswith("["):
            return Stacks("ok", "file", parse_pyspy_json(text), at_ns=at)
        return Stacks("ok", "file", parse_faulthandler(text), at_ns=at)
    except (ValueError, json.JSONDecodeError) as exc:
        return Stacks("failed", "file", error=f"{path}: neither py-spy JSON nor a faulthandler "
                      f"dump ({str(exc).splitlines()[0]})")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pyspy_dump(pid: int, timeout_s: float = PYSPY_TIMEOUT_S) -> Stacks:
    """`py-spy dump --pid PID --json`; a refusal or failure comes back as a status and one line."""
    exe = pyspy_path()
    if exe is None:
        return Stacks("failed", "py-spy", error="py-spy is not installed (pip install py-spy, "
                      "or `pip install infbench[diag]`)")
    if not pid_alive(pid):
        return Stacks("process_gone", "py-spy", error=f"pid {pid} is not running")
    at = time.time_ns()
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid), "--json"], capture_output=True,
                             text=True, timeout=timeout_s, check=False)
        if out.returncode != 0 and _SUSPEND.search(out.stderr or ""):
            # A process stopped already (SIGSTOP, a debugger) with several threads cannot be
            # suspended again: read its memory without suspending it; it is not moving anyway.
            out = subprocess.run([exe, "dump", "--nonblocking", "--pid", str(pid), "--json"],
                                 capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Stacks("failed", "py-spy", error=f"py-spy dump of pid {pid} took over {timeout_s:g} s")
    if out.returncode == 0:
        try:
            return Stacks("ok", "py-spy", parse_pyspy_json(out.stdout), at_ns=at)
        except (ValueError, json.JSONDecodeError) as exc:
            return Stacks("failed", "py-spy", error=f"py-spy printed no JSON for pid {pid} ({exc})")
    err = " ".join((out.stderr or out.stdout).split())
    if _PERMISSION.search(err):
        return Stacks("permission_denied", "py-spy", error=(
            f"py-spy may not attach to pid {pid} (ptrace refused): run as root or as the "
            "process's user with kernel.yama.ptrace_scope=0, or give the container "
            "CAP_SYS_PTRACE"))
    if _GONE.search(err) or not pid_alive(pid):
        return Stacks("process_gone", "py-spy", error=f"pid {pid} exited before py-spy read it")
    return Stacks("failed", "py-spy", error=f"py-spy failed on pid {pid}: {err[:200]}")


def faulthandler_via_signal(pid: int, path: Path, signum: int, timeout_s: float = 5.0) -> Stacks:
    """Ask a process that registered `faulthandler.register(signum, file=path)` for its stacks.
    Only used where the engine said it registered (a signal it did not register could kill it)."""
    before = path.stat().st_mtime_ns if path.exists() else -1
    offset = path.stat().st_size if path.exists() else 0  # the engine appends each dump
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return Stacks("process_gone", "faulthandler", error=f"pid {pid} is not running")
    except PermissionError:
        return Stacks("permission_denied", "faulthandler", error=f"may not signal pid {pid}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_mtime_ns != before and path.stat().st_size > 0:
            time.sleep(0.1)  # let the handler finish the write
            s = read_stacks_file(path, offset)
            s.source = "faulthandler"
            return s
        time.sleep(0.05)
    return Stacks("failed", "faulthandler", error=f"pid {pid} wrote no stacks to {path} "
                  f"within {timeout_s:g} s")


def stacks_rows(threads: list[Thread]) -> list[dict[str, Any]]:
    """One row per frame, innermost first (depth 0)."""
    return [{"thread_id": t.thread_id, "os_thread_id": t.os_thread_id, "thread_name": t.name,
             "active": t.active, "owns_gil": t.owns_gil, "depth": d, "function": f.function,
             "filename": f.filename, "line": f.line, "module": f.module}
            for t in threads for d, f in enumerate(t.frames)]
