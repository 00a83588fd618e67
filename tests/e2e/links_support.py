"""Helpers for the link probe's end-to-end tests: find processes a probe left behind."""

from __future__ import annotations

from pathlib import Path


def processes_with_env(marker: str) -> list[int]:
    """Pids whose environment holds `marker` (the CLI's ranks inherit the test's environment),
    except multiprocessing's resource tracker: a helper of the test process itself, which
    lives as long as it does (it is no rank)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in env:
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if b"multiprocessing.resource_tracker" not in cmd:
                found.append(int(d.name))
    return found
