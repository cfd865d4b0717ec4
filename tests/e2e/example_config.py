"""The shipped docs/fleetd.example.yaml, rewritten only where a test machine must differ.

``rewrite_example`` works on the parsed YAML, so when the example changes the suite follows
it. What it changes, and nothing else:

* where things live: ``state_dir`` → tmp; ``rules.local_dir`` → an empty tmp directory;
  ``http.bind`` → 127.0.0.1, ``http.port`` → a free port, ``http.tls_cert``/``tls_key`` →
  a self-signed pair in tmp (dropped, plain HTTP, only when openssl is missing);
  ``alerting.external_url`` → this daemon's own loopback address;
* the hardware: ``backend.kind: simulator`` (the scenario comes from ``--simulate``);
  ``poll.interval: 1s``;
* every receiver integration's endpoint → the loopback stand-ins, every ``*_file`` secret →
  a tmp file (``*_env`` secrets stay, the daemon gets the variable): PagerDuty
  ``routing_key_file``/``url``/``change_url``; Slack ``webhook_url_file`` or ``api_url``;
  Alertmanager ``url``/``bearer_token_file``; webhook ``url_file``; ``api.token_file``;
* ``registry.url_file`` is removed (no PostgreSQL registry here: per-node limits);
* remediation: ``mode: on``; shorter waits ``drain.balancer_delay``,
  ``drain.release_poll_interval``, ``verify.poll_interval``, ``readmit.poll_interval``;
  ``workers.systemctl`` → the stand-in script; the example's ``rotation`` commands keep
  their argument vectors with the program replaced by the stand-in ``vllm-rotation``;
* ``vllm.workers[*].url`` → the stand-in workers (names, GPUs, units, models kept).

``alerting.route`` (the routing tree, its grouping timers), ``alerting.inhibit_rules`` and
every other receiver setting (send_resolved, rate limits, max_alerts, …) stay exactly as
shipped; ``assert_routing_unchanged`` checks that, and ``assert_nothing_leaves_the_machine``
that no secret file or endpoint outside the test's loopback and tmp is left.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "fleetd.example.yaml"

# remediation waits shortened for a test run (seconds); everything else keeps the example's
FAST_REMEDIATION = {
    ("drain", "balancer_delay"): "1s",
    ("drain", "release_poll_interval"): "1s",
    ("verify", "poll_interval"): "1s",
    ("readmit", "poll_interval"): "1s",
}
# receiver keys the rewrite may touch: endpoints and secret sources
ENDPOINT_KEYS = frozenset(
    {"url", "change_url", "api_url", "routing_key_file", "webhook_url_file", "url_file",
     "bearer_token_file"}
)  # fmt: skip


@dataclass
class LocalMachine:
    """Where this test machine differs from a production node."""

    tmp: Path
    port: int
    pagerduty_url: str  # base URL of the PagerDuty stand-in
    routing_key: str
    slack_webhook_url: str
    slack_api_url: str
    webhook_url: str  # base URL of the webhook stand-in; the receiver name is the path
    alertmanager_urls: list[str]
    worker_urls: dict[str, str]
    systemctl: Path
    rotation: Path
    api_token: str
    secrets: dict[str, Path] = field(default_factory=dict)

    def secret(self, name: str, value: str) -> str:
        """A secret file (mode 0600) holding ``value``; its path."""
        directory = self.tmp / "secrets"
        directory.mkdir(mode=0o700, exist_ok=True)
        path = directory / name
        path.write_text(value + "\n")
        path.chmod(0o600)
        self.secrets[name] = path
        return str(path)


def load_example() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{EXAMPLE} is not a mapping"
    return data


def self_signed(directory: Path) -> tuple[Path, Path] | None:
    """A certificate for 127.0.0.1 and its key, or None without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = directory / "fleetd.crt", directory / "fleetd.key"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "2", "-subj", "/CN=fleetd-e2e", "-keyout", str(key),
            "-out", str(cert), "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    return cert, key


def rewrite_example(example: dict[str, Any], m: LocalMachine) -> dict[str, Any]:
    """The example, changed only where the test machine must differ (module docstring)."""
    c = copy.deepcopy(example)
    c["state_dir"] = str(m.tmp / "state")
    c["backend"] = {**c.get("backend", {}), "kind": "simulator"}
    c["poll"] = {**c.get("poll", {}), "interval": "1s"}

    http = c.setdefault("http", {})
    http["bind"], http["port"] = "127.0.0.1", m.port
    scheme = "http"
    if "tls_cert" in http or "tls_key" in http:
        pair = self_signed(m.tmp)
        if pair is None:
            http.pop("tls_cert", None)
            http.pop("tls_key", None)
        else:
            http["tls_cert"], http["tls_key"] = str(pair[0]), str(pair[1])
            scheme = "https"

    rules_dir = m.tmp / "rules.d"
    rules_dir.mkdir(exist_ok=True)
    c.setdefault("rules", {})["local_dir"] = str(rules_dir)

    workers = c.get("vllm", {}).get("workers", [])
    for worker in workers:
        worker["url"] = m.worker_urls[worker["name"]]

    alerting = c.setdefault("alerting", {})
    if "external_url" in alerting:
        alerting["external_url"] = f"{scheme}://127.0.0.1:{m.port}"
    for receiver in alerting.get("receivers", []):
        _rewrite_receiver(receiver, m)

    if "api" in c and "token_file" in c["api"]:
        c["api"]["token_file"] = m.secret("api-token", m.api_token)
    c.get("registry", {}).pop("url_file", None)

    remediation = c.setdefault("remediation", {})
    remediation["mode"] = "on"
    for (section, key), value in FAST_REMEDIATION.items():
        remediation.setdefault(section, {})[key] = value
    worker_cfg = remediation.setdefault("workers", {})
    worker_cfg["systemctl"] = str(m.systemctl)
    rotation = worker_cfg.get("rotation") or {}
    for key in ("out_command", "in_command"):
        if key in rotation:
            rotation[key] = [str(m.rotation), *rotation[key][1:]]
    return c


def _rewrite_receiver(receiver: dict[str, Any], m: LocalMachine) -> None:
    name = receiver["name"]
    for i, pd in enumerate(receiver.get("pagerduty", [])):
        pd["routing_key_file"] = m.secret(f"{name}-pagerduty-{i}", m.routing_key)
        pd["url"] = m.pagerduty_url + "/v2/enqueue"
        pd["change_url"] = m.pagerduty_url + "/v2/change/enqueue"
    for i, slack in enumerate(receiver.get("slack", [])):
        if "webhook_url_file" in slack:
            slack["webhook_url_file"] = m.secret(f"{name}-slack-{i}", m.slack_webhook_url)
        else:  # a bot token (kept as shipped: *_env, or a file written here)
            slack["api_url"] = m.slack_api_url
    for i, am in enumerate(receiver.get("alertmanager", [])):
        am["url"] = m.alertmanager_urls[i % len(m.alertmanager_urls)]
        if "bearer_token_file" in am:
            am["bearer_token_file"] = m.secret(f"{name}-alertmanager-{i}", "e2e-am-token")
    for i, hook in enumerate(receiver.get("webhook", [])):
        hook["url_file"] = m.secret(f"{name}-webhook-{i}", f"{m.webhook_url}/{name}")


# ---------------------------------------------------------------------------------- checks
def _without_endpoints(receivers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Receivers with the keys the rewrite may change removed."""
    out = []
    for receiver in receivers:
        kept: dict[str, Any] = {}
        for kind, value in receiver.items():
            if isinstance(value, list):
                kept[kind] = [
                    {k: v for k, v in entry.items() if k not in ENDPOINT_KEYS} for entry in value
                ]
            else:
                kept[kind] = value
        out.append(kept)
    return out


def assert_routing_unchanged(example: dict[str, Any], rewritten: dict[str, Any]) -> None:
    """The routing tree, its timers, the inhibit rules and receiver settings are as shipped."""
    shipped, used = example.get("alerting", {}), rewritten.get("alerting", {})
    assert "route" in shipped and "inhibit_rules" in shipped, "the example lost its routing"
    assert used.get("route") == shipped["route"], "alerting.route was changed"
    assert used.get("inhibit_rules") == shipped["inhibit_rules"], "inhibit_rules were changed"
    assert used.get("delivery") == shipped.get("delivery"), "alerting.delivery was changed"
    assert _without_endpoints(used.get("receivers", [])) == _without_endpoints(
        shipped.get("receivers", [])
    ), "a receiver setting other than its endpoint or secret was changed"
    assert rewritten.get("node") == example.get("node"), "node (labels) was changed"


def _walk(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")
    else:
        yield path, value


def assert_nothing_leaves_the_machine(config: dict[str, Any], tmp: Path) -> None:
    """Every secret file and path is under tmp; every endpoint fleetd calls is loopback."""
    for path, value in _walk(config):
        leaf = path.rsplit(".", 1)[-1]
        if leaf.endswith("_file") or leaf in ("state_dir", "local_dir", "tls_cert", "tls_key"):
            assert str(value).startswith(str(tmp)), f"{path} = {value} is outside {tmp}"
        if path.startswith(("alerting.receivers", "vllm.workers")) and leaf in (
            "url",
            "change_url",
            "api_url",
        ):
            assert str(value).startswith("http://127.0.0.1:"), f"{path} = {value} leaves loopback"
    assert "url_file" not in config.get("registry", {}), "the fleet registry would be contacted"
    commands = config.get("remediation", {}).get("workers", {})
    assert str(commands.get("systemctl", "")).startswith(str(tmp)), "the real systemctl is used"
    for key in ("out_command", "in_command"):
        argv = (commands.get("rotation") or {}).get(key)
        assert argv is None or str(argv[0]).startswith(str(tmp)), f"rotation {key} is real"


def write_config(config: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
