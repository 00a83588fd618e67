"""Fixtures for end-to-end tests: a reference engine subprocess shared by a test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.engine_process import EngineProcess, running_engine
from tests.support.process import sse_server


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineProcess]:
    with running_engine() as e:
        yield e


@pytest.fixture(scope="module")
def docs_server() -> Iterator[str]:
    """The known-schedule mock server a document's examples run against (docs_runner.py)."""
    with sse_server("--ttft-ms", "3", "--itl-ms", "1") as url:
        yield url


@pytest.fixture(scope="module")
def docs_workspaces() -> dict:
    """Each document's scratch directory, made when its first section runs (docs_runner.py)."""
    return {}
