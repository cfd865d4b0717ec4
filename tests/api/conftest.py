"""Fixtures for the API tests: a real agent on loopback running the simulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.agent import Agent, start_agent


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """An agent that has polled three times (all GPUs healthy)."""
    running = start_agent(tmp_path / "agent")
    running.tick(3)
    try:
        yield running
    finally:
        running.stop()
