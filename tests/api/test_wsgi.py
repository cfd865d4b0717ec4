"""The API as a WSGI application: the same router answers in-process (Werkzeug's test client)
and through the standard library's wsgiref server exactly as through fleetd's own server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import requests
from werkzeug.test import Client

from fleetd.api.wsgi import wsgi_app
from tests.api.agent import TOKEN, Agent


@pytest.fixture
def client(agent: Agent) -> Client:
    return Client(wsgi_app(agent.daemon.router))


def test_reads_answer_in_process_as_on_the_wire(agent: Agent, client: Client) -> None:
    wire = requests.get(f"{agent.url}/api/v1/status", timeout=10).json()
    answer = client.get("/api/v1/status")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "application/json"
    in_process = answer.get_json()
    assert in_process["node"] == wire["node"] == "gpu-node-001"
    assert [g["gpu"] for g in in_process["gpus"]] == [g["gpu"] for g in wire["gpus"]]
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert b"fleetd_gpu_up{" in metrics.data
    health = client.get("/healthz").get_json()
    assert health["status"] == "ok"


def test_errors_keep_their_status_and_json_body(client: Client) -> None:
    missing = client.get("/api/v1/nothing-here")
    assert (missing.status_code, missing.get_json()["error"]) == (
        404,
        "no such path: /api/v1/nothing-here",
    )
    wrong = client.delete("/api/v1/status")
    assert wrong.status_code == 405 and "GET" in wrong.headers["Allow"]
    unauthenticated = client.post("/api/v1/remediation/pause", json={"reason": "x"})
    assert unauthenticated.status_code == 401
    huge = client.post(
        "/api/v1/remediation/pause",
        data=b"x" * ((1 << 20) + 1),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert huge.status_code == 413


def test_a_mutation_through_wsgi_is_recorded_with_who_and_why(agent: Agent, client: Client) -> None:
    answer = client.post(
        "/api/v1/remediation/pause",
        json={"reason": "rack maintenance"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert agent.remedy is not None and agent.remedy.status().paused is not None
    assert answer.get_json()["pause"]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def wsgiref_url(agent: Agent) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, wsgi_app(agent.daemon.router), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_standard_library_server_serves_the_same_api(agent: Agent, wsgiref_url: str) -> None:
    ours = requests.get(f"{agent.url}/api/v1/alerts", timeout=10)
    theirs = requests.get(f"{wsgiref_url}/api/v1/alerts", timeout=10)
    assert theirs.status_code == ours.status_code == 200
    assert theirs.json() == ours.json()
    ours_head = requests.head(f"{agent.url}/metrics", timeout=10)
    theirs_head = requests.head(f"{wsgiref_url}/metrics", timeout=10)
    assert theirs_head.status_code == ours_head.status_code == 405
    assert theirs_head.headers["Allow"] == ours_head.headers["Allow"] == "GET"
