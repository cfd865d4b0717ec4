"""The one vLLM metrics parser: the collector and the drain read a server the same way."""

from __future__ import annotations

import requests
from pytest_httpserver import HTTPServer

from fleetd.vllm.client import read_load
from fleetd.vllm.collector import RUNNING, WAITING, worker_readings
from fleetd.vllm.config import VllmWorkerConfig
from fleetd.vllm.metrics import parse_vllm_metrics

TWO_ENGINES = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} NaN
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} -1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 65535.0
"""


def test_counts_that_look_like_amdsmi_sentinels_are_counts() -> None:
    """65535 and 2**32-1 mean "not available" from amdsmi, but are plain counts from vLLM."""
    assert parse_vllm_metrics(TWO_ENGINES).generation_tokens == 65535.0
    text = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 4294967295\n"
    assert parse_vllm_metrics(text).generation_tokens == 4294967295.0


def test_drain_and_collector_agree_on_load(httpserver: HTTPServer) -> None:
    """A NaN or negative engine gauge is no value for both (the drain once summed it)."""
    httpserver.expect_request("/metrics").respond_with_data(TWO_ENGINES)
    worker = VllmWorkerConfig(name="w0", url=httpserver.url_for("/"), gpus=[0])
    load = read_load(requests.Session(), worker, timeout=2.0)
    values = parse_vllm_metrics(TWO_ENGINES)
    readings = {r.metric: r.value for r in worker_readings(worker, True, values, None, 0.0)}
    assert (load.running, load.waiting) == (3.0, 2.0)
    assert (readings[RUNNING], readings[WAITING]) == (load.running, load.waiting)
    assert not load.idle
