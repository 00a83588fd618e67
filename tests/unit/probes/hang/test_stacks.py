"""Stacks of real processes: py-spy (and its ptrace refusal, said in one line), faulthandler
on a signal (thread ids that match py-spy's), a process that is gone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from probes.hang import stacks as st

CHILD = """
import faulthandler, signal, sys, threading, time
f = open(sys.argv[1], "a")
faulthandler.register(signal.SIGUSR2, file=f, all_threads=True, chain=False)
def helper_loop():
    threading.Event().wait()
def blocked_in_a_named_function():
    threading.Event().wait()
threading.Thread(target=helper_loop, name="helper", daemon=True).start()
print("ready", flush=True)
blocked_in_a_named_function()
"""


@pytest.fixture()
def child(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    out = tmp_path / "stacks_rank_0"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid, out
    finally:
        proc.kill()
        proc.wait()


needs_pyspy = pytest.mark.skipif(st.pyspy_path() is None, reason="py-spy is not installed")


@needs_pyspy
def test_pyspy_reads_every_thread_innermost_first(child) -> None:
    pid, _ = child
    s = st.pyspy_dump(pid)
    assert s.status == "ok" and s.source == "py-spy", s.error
    main = next(t for t in s.threads if t.os_thread_id == pid)
    names = [f.function for f in main.frames]
    # py-spy names methods by their class (3.11 qualnames); innermost first, outwards
    assert names[:2] == ["Condition.wait", "Event.wait"]
    assert names.index("blocked_in_a_named_function") == 2
    assert main.frames[0].filename.endswith("threading.py")
    assert {t.name for t in s.threads} >= {"MainThread", "helper"}
    rows = st.stacks_rows(s.threads)
    assert {r["depth"] for r in rows if r["thread_name"] == "MainThread"} == set(range(len(main.frames)))


@needs_pyspy
def test_a_stopped_process_with_threads_is_read_without_suspending_it(child) -> None:
    # A frozen engine (SIGSTOP, as the real-engine tests freeze vLLM's EngineCore) cannot be
    # suspended again by py-spy ("Failed to suspend process"); its memory still reads.
    pid, _ = child
    # "ready" is printed just before the call: wait until the stack shows it, then freeze.
    for _ in range(50):
        running = st.pyspy_dump(pid)
        if any(f.function == "blocked_in_a_named_function" for t in running.threads for f in t.frames):
            break
    os.kill(pid, signal.SIGSTOP)
    try:
        s = st.pyspy_dump(pid)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert s.status == "ok", s.error
    assert {t.name for t in s.threads} >= {"MainThread", "helper"}
    main = next(t for t in s.threads if t.name == "MainThread")
    assert "blocked_in_a_named_function" in [f.function for f in main.frames]


@needs_pyspy
def test_faulthandler_thread_ids_are_pyspys_and_the_latest_dump_wins(child) -> None:
    pid, out = child
    first = st.faulthandler_via_signal(pid, out, signal.SIGUSR2)
    second = st.faulthandler_via_signal(pid, out, signal.SIGUSR2)
    assert first.status == second.status == "ok" and second.source == "faulthandler"
    assert len(second.threads) == 2  # only what was appended for this signal
    whole = st.read_stacks_file(out)
    assert len(whole.threads) == 2  # appended dumps: each thread as in the latest
    spy = st.pyspy_dump(pid)
    assert {t.thread_id for t in second.threads} == {t.thread_id for t in spy.threads}
    fh_main = next(t for t in second.threads if any(
        f.function == "blocked_in_a_named_function" for f in t.frames))
    assert fh_main.frames[0].function == "wait"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or st.pyspy_path() is None,
                    reason="needs root, setpriv and py-spy to run py-spy as another user")
def test_ptrace_refusal_is_detected_and_said_in_one_line(child, tmp_path: Path, monkeypatch) -> None:
    pid, _ = child
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f"#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups "
                       f"{st.pyspy_path()} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(st, "pyspy_path", lambda: str(wrapper))
    s = st.pyspy_dump(pid)
    assert s.status == "permission_denied"
    assert "ptrace" in s.error and "\n" not in s.error and str(pid) in s.error


def test_gone_process_and_missing_pyspy(monkeypatch) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert st.pyspy_dump(proc.pid).status == "process_gone"
    monkeypatch.setattr(st, "pyspy_path", lambda: None)
    s = st.pyspy_dump(os.getpid())
    assert s.status == "failed" and "pip install py-spy" in s.error


def test_saved_files_parse_or_say_why(tmp_path: Path) -> None:
    fh = tmp_path / "stacks_1.txt"
    fh.write_text('Thread 0x00007f0000000001 (most recent call first):\n'
                  '  File "/usr/lib/python3.11/threading.py", line 327 in wait\n'
                  '  File "/srv/engine/worker.py", line 88 in step_loop\n\n'
                  'Current thread 0x00007f0000000002 (most recent call first):\n'
                  '  File "/srv/engine/server.py", line 12 in <module>\n')
    s = st.read_stacks_file(fh)
    assert s.status == "ok"
    assert [(t.thread_id, [f.function for f in t.frames]) for t in s.threads] == [
        (str(0x7F0000000001), ["wait", "step_loop"]), (str(0x7F0000000002), ["<module>"])]
    bad = tmp_path / "stacks_2.json"
    bad.write_text("[{\"no\": 1}]")
    r = st.read_stacks_file(bad)
    assert r.status == "failed" and "neither py-spy JSON nor a faulthandler dump" in r.error

