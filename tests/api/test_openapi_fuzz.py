"""Fuzz every operation of docs/api/openapi.yaml against a real agent: no 5xx, ever, and every
answer has a documented status, content type and shape."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks

from tests.api.agent import TOKEN, Agent, start_agent

SPEC = Path(__file__).resolve().parents[2] / "docs" / "api" / "openapi.yaml"
MAX_EXAMPLES = int(os.environ.get("FLEETD_FUZZ_EXAMPLES", "6"))  # raise it for a longer hunt
schema = schemathesis.openapi.from_path(SPEC)


@pytest.fixture(scope="module")
def fuzzed_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    running = start_agent(tmp_path_factory.mktemp("fuzz"))
    running.sim.inject(3, "ecc_uncorrectable", persistent=True)
    running.tick(4)
    try:
        yield running
    finally:
        running.stop()


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_openapi_document(case: schemathesis.Case, fuzzed_agent: Agent) -> None:
    case.call_and_validate(
        base_url=fuzzed_agent.url,
        headers={"Authorization": f"Bearer {TOKEN}"},
        checks=[
            checks.not_a_server_error,
            checks.status_code_conformance,
            checks.content_type_conformance,
            checks.response_schema_conformance,
        ],
    )
