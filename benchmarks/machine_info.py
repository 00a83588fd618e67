"""One description of the machine a benchmark ran on, for every results file.

The machines are shared and noisy, so the load average at the start goes in too.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def describe(*extras: str) -> str:
    """CPU, logical CPUs, memory, OS, Python, then `extras` (library versions, GPU), then load."""
    parts = [f"{cpu_model()}, {os.cpu_count()} logical CPUs"]
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        parts[0] += f", {kb / 1e6:.0f} GB RAM"
    except (OSError, ValueError, IndexError):
        pass
    parts.append(f"{platform.system()} {platform.release()}")
    parts.append(", ".join([f"Python {platform.python_version()}", *extras]))
    if hasattr(os, "getloadavg"):
        parts.append("load average at start " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return "; ".join(parts)
