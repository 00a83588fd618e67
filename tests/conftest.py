"""Suite-wide settings.

Property tests run derandomized by default: the same examples on every machine, so CI's
verdict does not depend on which random examples a run drew. To search for new failing
examples, run with `HYPOTHESIS_PROFILE=explore` (random, 10x the examples); add what it finds
as an `@example` so the default run keeps checking it.

Tiers: `python -m pytest -m "not slow"` is the quick loop (unit tests, the code checks);
every test that starts processes (tests/e2e, tests/real_engine) or times rank groups
(`serial`) is also `slow`, added here so no file can forget it. CI runs all of them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Machines that set PYTHONDONTWRITEBYTECODE=1 (this project's CI image does) make every process
# the suite starts compile our sources again: `import infbench.commands.run` 2.5 s instead of
# 0.8 s, an engine's imports 1.2 s instead of 0.5 s, collecting the quick loop 16 s instead of
# 5 s (pytest rewrites each test module's asserts and caches the result only as bytecode). The
# suite starts hundreds of engines and CLI calls, so it writes bytecode (to __pycache__/, which
# git ignores) for itself and for the processes it starts, whatever the shell said.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

settings.register_profile("default", derandomize=True, database=None)
settings.register_profile("explore", max_examples=1000, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


_SLOW_DIRS = tuple(Path(__file__).parent / d for d in ("e2e", "real_engine"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if any(d in path.parents for d in _SLOW_DIRS) or item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile` hands files out longest first, the real-engine files as one unit
    (tests/support/schedule.py says why)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from tests.support.schedule import LongestFirstScheduling
    return LongestFirstScheduling(config, log)


@pytest.fixture(autouse=True, scope="session")
def _store_templates_in_pytest_temp(tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.support import stores
    stores.TEMPLATE_DIR = tmp_path_factory.getbasetemp()
