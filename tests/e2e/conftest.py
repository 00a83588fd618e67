"""Fixtures for end-to-end tests: a reference engine subprocess shared by a test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.engine_process import EngineProcess, running_engine


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineProcess]:
    with running_engine() as e:
        yield e
