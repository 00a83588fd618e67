"""The test suite's CLI fork server (tests/support/cli_zygote.py) gives each call what a fresh
`python -m` process would have: its own pid, cwd, environment, argv, stdin, exit status, fresh
random state and default signal handlers; calls from threads run at once; a timeout kills."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.cli import ROOT, Zygote, cli_env

PROBE = [sys.executable, "-m", "tests.support.zygote_probe"]


@pytest.fixture(scope="module")
def zygote() -> Zygote:
    z = Zygote()
    yield z
    z.close()


def test_each_call_is_its_own_process_with_its_own_cwd_env_and_random_state(
        zygote: Zygote, tmp_path: Path) -> None:
    runs = [zygote.run([*PROBE, "report"], tmp_path, cli_env(ZYGOTE_PROBE=f"v{i}"), 30)
            for i in range(3)]
    seen = [json.loads(r.stdout) for r in runs]
    assert all(r.returncode == 0 and r.stderr == "" for r in runs), runs
    assert len({s["pid"] for s in seen}) == 3 and {s["ppid"] for s in seen} == {zygote.proc.pid}
    assert [s["env"] for s in seen] == ["v0", "v1", "v2"]
    assert {s["cwd"] for s in seen} == {str(tmp_path)}
    assert seen[0]["argv"][1:] == ["report"]
    # A fork copies the server's generators: each child must be reseeded, as a new process is.
    assert len({s["random"] for s in seen}) == 3 and len({s["np_random"] for s in seen}) == 3
    assert all(s["sigint"] for s in seen) and all(s["stdin"] == "" for s in seen)


@pytest.mark.parametrize("code", [0, 2, 7])
def test_exit_status_and_stderr_are_the_processs(zygote: Zygote, code: int) -> None:
    r = zygote.run([*PROBE, "fail", str(code)], ROOT, cli_env(), 30)
    assert (r.returncode, r.stdout, r.stderr) == (code, "", "one line\n")


def test_an_exception_is_a_traceback_and_exit_1_as_in_a_fresh_interpreter(zygote: Zygote) -> None:
    fresh = subprocess.run([*PROBE, "raise"], cwd=ROOT, env=cli_env(), capture_output=True, text=True)
    r = zygote.run([*PROBE, "raise"], ROOT, cli_env(), 30)
    assert r.returncode == fresh.returncode == 1
    assert r.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1] == "ValueError: boom"


def test_calls_from_threads_run_at_the_same_time(zygote: Zygote, tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    waiting: list[subprocess.CompletedProcess[str]] = []
    t = threading.Thread(target=lambda: waiting.append(
        zygote.run([*PROBE, "wait", str(flag)], ROOT, cli_env(), 60)))
    t.start()
    # The waiting call only returns once this second one has run: served one at a time,
    # the first would wait out its 30 s and print "not seen".
    assert zygote.run([*PROBE, "touch", str(flag)], ROOT, cli_env(), 60).returncode == 0
    t.join(60)
    assert waiting and waiting[0].stdout == "seen\n"


def test_a_timeout_kills_the_call_as_subprocess_run_does(zygote: Zygote) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([*PROBE, "sleep", "60"], ROOT, cli_env(), 0.5)
    assert zygote.run([*PROBE, "fail", "3"], ROOT, cli_env(), 30).returncode == 3  # still serving


def test_the_preloaded_cli_reads_no_environment_at_import() -> None:
    """The server imports the CLI once under its own environment; a call's environment only
    reaches what reads it when the command runs. So no module of ours may read it at import,
    and what libraries read then must not be a variable the tests set per call."""
    code = (
        "import json, os, sys\n"
        "reads = []\n"
        "orig = os._Environ.__getitem__\n"
        "def spy(self, key):\n"
        "    f = sys._getframe(1)\n"
        "    while f and f.f_globals.get('__name__', '') in ('os', '_collections_abc', 'collections.abc'):\n"
        "        f = f.f_back\n"
        "    reads.append((key, f.f_globals.get('__name__', '') if f else ''))\n"
        "    return orig(self, key)\n"
        "os._Environ.__getitem__ = spy\n"
        "from tests.support.cli_zygote import preload\n"
        "preload()\n"
        "print(json.dumps(reads))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=cli_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    reads = json.loads(r.stdout)
    ours = [(k, m) for k, m in reads if m.split(".")[0] in ("infbench", "probes", "playbooks",
                                                              "reference_engine")]
    assert not ours, ours
    per_call = {"COLUMNS", "VLLM_API_KEY", "OPENAI_API_KEY", "NO_COLOR", "FORCE_COLOR", "TERM"}
    assert not {k for k, _ in reads} & per_call, reads
