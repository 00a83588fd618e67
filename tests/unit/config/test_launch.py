"""The launch template and the flags a probe adds, and the bisect command's input checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from infbench.config.launch import Launcher, LaunchError
from tests.support.cli import infbench


def test_flags_follow_the_engines_conventions() -> None:
    lx = Launcher("x", flag_names={"cudagraph_capture_sizes": "-cc.cudagraph_capture_sizes"})
    assert lx.flags({"max_num_seqs": 64, "enable_prefix_caching": False, "async_scheduling": True,
                     "cudagraph_capture_sizes": [1, 2, 4], "kv_cache_dtype": None}) == [
        "--async-scheduling", "-cc.cudagraph_capture_sizes", "1,2,4", "--no-enable-prefix-caching",
        "--max-num-seqs", "64"]


def test_template_placeholders() -> None:
    lx = Launcher("{python} -m reference_engine --port {port} --defaults 'my file.toml' {args} --x")
    argv = lx.argv(8123, {"block_size": 32})
    assert argv == [sys.executable, "-m", "reference_engine", "--port", "8123", "--defaults",
                    "my file.toml", "--block-size", "32", "--x"]
    assert Launcher("serve --port {port}").argv(1, {"a": 1}) == ["serve", "--port", "1", "--a", "1"]
    with pytest.raises(LaunchError, match="launch template"):
        Launcher("serve 'unclosed").argv(1, {})


def test_an_engine_that_exits_or_never_gets_healthy_is_a_clear_error(tmp_path: Path) -> None:
    died = Launcher(f"{sys.executable} -c 'import sys; print(\"boom\"); sys.exit(3)'", start_timeout_s=20)
    with pytest.raises(LaunchError, match="exited with code 3 before it was healthy: boom"), \
            died.running({}, tmp_path):
        pass
    slow = Launcher(f"{sys.executable} -c 'import time; time.sleep(30)'", start_timeout_s=0.5)
    with pytest.raises(LaunchError, match="not healthy .* within 0.5 s"), slow.running({}, tmp_path):
        pass


@pytest.mark.parametrize("args, message", [
    (["--flag", "max_num_seqs"], "is not KEY=--flag"),
    (["--num-requests", "0"], "must be positive"),
    (["--good", "nope"], "no such config"),
])
def test_bisect_input_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    base = {"--good": "a", "--bad": "b", "--launch": "serve {port}"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    flat = [x for kv in base.items() for x in kv]
    r = infbench("config", "bisect", "--db", str(tmp_path / "s.duckdb"), *flat)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
