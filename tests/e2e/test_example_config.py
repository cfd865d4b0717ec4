"""The rewrite of docs/fleetd.example.yaml the e2e runs use: only what a test machine must
change is changed, the routing and inhibition are the shipped ones, and fleetd accepts it."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.example_config import (
    LocalMachine,
    assert_nothing_leaves_the_machine,
    assert_routing_unchanged,
    load_example,
    rewrite_example,
    write_config,
)
from tests.e2e.harness import BOT_TOKEN_ENV

# every path the rewrite may change (regular expressions over dotted paths)
ALLOWED = [
    r"state_dir", r"backend\.kind", r"poll\.interval", r"http\.(bind|port|tls_cert|tls_key)",
    r"rules\.local_dir", r"vllm\.workers\[\d+\]\.url", r"alerting\.external_url",
    r"alerting\.receivers\[\d+\]\.\w+\[\d+\]\.(url|change_url|api_url|routing_key_file|"
    r"webhook_url_file|url_file|bearer_token_file)",
    r"api\.token_file", r"registry\.url_file",
    r"remediation\.mode", r"remediation\.(drain|verify|readmit)\.\w*(delay|interval)",
    r"remediation\.workers\.systemctl", r"remediation\.workers\.rotation\.(out|in)_command\[0\]",
]  # fmt: skip


def machine(tmp: Path) -> LocalMachine:
    loop = "http://127.0.0.1:9"
    return LocalMachine(
        tmp=tmp, port=19477, pagerduty_url=loop, routing_key="k" * 32,
        slack_webhook_url=loop + "/services/T/B/x", slack_api_url=loop + "/api",
        webhook_url=loop, alertmanager_urls=[loop, "http://127.0.0.1:10"],
        worker_urls={f"gpu{i}": f"http://127.0.0.1:{18000 + i}" for i in range(8)},
        systemctl=tmp / "bin" / "systemctl", rotation=tmp / "bin" / "vllm-rotation",
        api_token="t" * 32,
    )  # fmt: skip


def changed(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted paths where ``b`` differs from ``a`` (added, removed or changed leaves)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            out += changed(a.get(key), b.get(key), sub) if key in a and key in b else [sub]
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True))
                for p in changed(x, y, f"{path}[{i}]")]  # fmt: skip
    return [] if a == b else [path]


def test_only_what_a_test_machine_must_differ_in_is_rewritten(tmp_path: Path) -> None:
    example = load_example()
    rewritten = rewrite_example(example, machine(tmp_path))
    unexpected = [p for p in changed(example, rewritten)
                  if not any(re.fullmatch(rule, p) for rule in ALLOWED)]  # fmt: skip
    assert not unexpected, f"rewritten beyond what the test machine needs: {unexpected}"
    assert_routing_unchanged(example, rewritten)
    assert_nothing_leaves_the_machine(rewritten, tmp_path)
    assert rewritten["remediation"]["mode"] == "on"
    assert rewritten["backend"]["kind"] == "simulator"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c["alerting"]["route"]["routes"][0].update(group_wait="1s"),
        lambda c: c["alerting"]["inhibit_rules"].pop(),
        lambda c: c["alerting"]["receivers"][1]["slack"][0]["rate_limit"].update(burst=5),
    ],
    ids=["group_wait", "inhibit_rule", "receiver_rate_limit"],
)
def test_the_routing_check_catches_a_changed_route(tmp_path: Path, mutate: Any) -> None:
    example = load_example()
    rewritten = copy.deepcopy(rewrite_example(example, machine(tmp_path)))
    mutate(rewritten)
    with pytest.raises(AssertionError):
        assert_routing_unchanged(example, rewritten)


def test_fleetd_accepts_the_rewritten_example(tmp_path: Path) -> None:
    config = write_config(rewrite_example(load_example(), machine(tmp_path)), tmp_path / "f.yaml")
    result = subprocess.run(
        [sys.executable, "-m", "fleetd", "config", "check", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, BOT_TOKEN_ENV: "xoxb-check"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
