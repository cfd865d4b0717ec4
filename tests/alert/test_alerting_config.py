"""The ``alerting:`` section of fleetd.yaml: strict, every error with file:line, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.alert.config import AlertingConfig
from fleetd.alert.matchers import format_matcher, matcher_from_dict, parse_matcher
from fleetd.config import load_config
from fleetd.errors import ConfigError

GOOD = """\
node:
  name: node7
alerting:
  external_url: https://node7.example:9477
  receivers:
    - name: oncall
      pagerduty:
        - routing_key_env: FLEETD_TEST_PD_KEY
    - name: chat
      slack:
        - webhook_url_file: {secret_file}
          send_resolved: true
    - name: am
      alertmanager:
        - url: http://127.0.0.1:9093
        - url: http://127.0.0.1:9094
  route:
    receiver: chat
    group_by: [alertname, node]
    routes:
      - matchers: ['severity="critical"']
        receiver: oncall
        continue: true
      - matchers: ['alertname=~".+"']
        receiver: am
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleetd.yaml"
    path.write_text(text)
    return path


def test_good_config_with_secrets_from_env_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_file = tmp_path / "slack-url"
    secret_file.write_text("https://hooks.slack.com/services/T0/B0/SECRET\n")
    monkeypatch.setenv("FLEETD_TEST_PD_KEY", "k" * 32)
    cfg = load_config(write(tmp_path, GOOD.format(secret_file=secret_file))).alerting
    pd = cfg.receivers[0].pagerduty[0]
    assert pd.routing_key.reveal() == "k" * 32
    assert str(pd.routing_key) == "<secret>"
    slack = cfg.receivers[1].slack[0]
    assert slack.webhook_url is not None
    assert slack.webhook_url.reveal().endswith("/SECRET")
    assert "SECRET" not in repr(cfg) and "k" * 32 not in cfg.model_dump_json()
    assert [a.url for a in cfg.receivers[2].alertmanager] == [
        "http://127.0.0.1:9093",
        "http://127.0.0.1:9094",
    ]
    assert cfg.root_route().group_wait == 30


@pytest.mark.parametrize(
    ("snippet", "line", "key", "message"),
    [
        (
            "alerting:\n  receivers:\n    - name: a\n      console: [{}]\n      colour: red\n",
            5,
            "alerting.receivers[0].colour",
            "unknown key",
        ),
        (
            "alerting:\n  receivers:\n    - name: a\n      slack:\n        - channel: '#x'\n",
            5,
            "alerting.receivers[0].slack[0]",
            "exactly one of webhook_url or bot_token",
        ),
        (
            "alerting:\n  route:\n    receiver: a\n    matchers: []\n    routes:\n"
            "      - matchers: ['gpu 3']\n",
            6,
            "alerting.route.routes[0].matchers",
            "invalid matcher",
        ),
        (
            "alerting:\n  receivers:\n    - name: a\n      console: [{}]\n  route:\n"
            "    receiver: a\n    routes:\n      - receiver: b\n",
            8,
            "alerting.route.routes[0].receiver",
            "unknown receiver 'b'; receivers: a",
        ),
        (
            "alerting:\n  route:\n    receiver: console\n    group_interval: 0s\n",
            4,
            "alerting.route.group_interval",
            "greater than zero",
        ),
        (
            "alerting:\n  receivers:\n    - name: a\n      webhook:\n        - url: x\n"
            "          timeout: 1h\n",
            6,
            "alerting.receivers[0].webhook[0].timeout",
            "between 0s and 5m",
        ),
    ],
)
def test_errors_name_file_line_and_key(
    tmp_path: Path, snippet: str, line: int, key: str, message: str
) -> None:
    path = write(tmp_path, snippet)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = caught.value.problems
    assert any(
        p.file == str(path) and p.line == line and p.key == key and message in p.message
        for p in problems
    ), [str(p) for p in problems]


ROUTES_AND_OTHER_ERRORS = """\
node:
  name: node7
  colour: blue
alerting:
  receivers:
    - name: oncall
      pagerduty:
        - routing_key: kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk
          timeout: 1h
    - name: chat
      console: [{}]
    - name: chat
      console: [{}]
  route:
    receiver: chat
    group_interval: 0s
    routes:
      - matchers: ['severity="critical"']
        receiver: pager
        routes:
          - receiver: nobody
            group_by: ['...', gpu]
      - receiver: oncall
"""


def test_every_route_problem_at_its_own_key_alongside_every_other_problem(
    tmp_path: Path,
) -> None:
    """pydantic skips model validators after a field error; these checks are field errors of
    their own, so one run of ``fleetd config check`` lists everything."""
    path = write(tmp_path, ROUTES_AND_OTHER_ERRORS)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    found = {(p.line, p.key, p.message) for p in caught.value.problems}
    assert found == {
        (3, "node.colour", "unknown key"),
        (9, "alerting.receivers[0].pagerduty[0].timeout", "timeout must be between 0s and 5m"),
        (
            10,
            "alerting.receivers[1].name",
            "receiver names must be unique ('chat' is used more than once)",
        ),
        (
            12,
            "alerting.receivers[2].name",
            "receiver names must be unique ('chat' is used more than once)",
        ),
        (16, "alerting.route.group_interval", "must be greater than zero"),
        (
            19,
            "alerting.route.routes[0].receiver",
            "must name a receiver (unknown receiver 'pager'; receivers: chat, oncall)",
        ),
        (
            21,
            "alerting.route.routes[0].routes[0].receiver",
            "must name a receiver (unknown receiver 'nobody'; receivers: chat, oncall)",
        ),
        (
            22,
            "alerting.route.routes[0].routes[0].group_by",
            "'...' (group by every label) cannot be combined with other labels",
        ),
    }


@pytest.mark.parametrize(
    ("snippet", "line", "key", "message"),
    [
        (
            "alerting:\n  receivers:\n    - name: a\n      console: [{}]\n  route:\n"
            "    matchers: ['gpu=\"1\"']\n    receiver: a\n",
            5,
            "alerting.route",
            "the root route matches everything",
        ),
        (
            "alerting:\n  route:\n    group_wait: 1s\n",
            2,
            "alerting.route",
            "receiver is required on the root route",
        ),
        ("alerting:\n  receivers: []\n", 2, "alerting.receivers", "at least one receiver"),
        (
            "alerting:\n  route:\n    receiver: console\n    routes:\n      - receiver: x\n",
            5,
            "alerting.route.routes[0].receiver",
            "unknown receiver 'x'; receivers: console",  # the default receiver
        ),
    ],
)
def test_root_route_and_receiver_list_problems(
    tmp_path: Path, snippet: str, line: int, key: str, message: str
) -> None:
    path = write(tmp_path, snippet)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    # a file without receivers is also told that it needs some (fleetd.config); that one
    # problem comes on top of the routing problem under test
    problems = [
        p
        for p in caught.value.problems
        if key == "alerting.receivers" or "required in a config file" not in p.message
    ]
    assert [(p.line, p.key) for p in problems] == [(line, key)]
    assert message in problems[0].message


@pytest.mark.parametrize(
    ("text", "name", "op", "value"),
    [
        ('severity="critical"', "severity", "=", "critical"),
        ("gpu!=3", "gpu", "!=", "3"),
        ('alertname=~"Gpu.*"', "alertname", "=~", "Gpu.*"),
        (' sensor !~ "hbm|edge" ', "sensor", "!~", "hbm|edge"),
        ('summary="say \\"hi\\""', "summary", "=", 'say "hi"'),
    ],
)
def test_matcher_text_round_trips(text: str, name: str, op: str, value: str) -> None:
    m = parse_matcher(text)
    assert (m.name, m.op, m.value) == (name, op, value)
    assert parse_matcher(format_matcher(m)) == m


def test_matcher_api_form_and_errors() -> None:
    m = matcher_from_dict({"name": "gpu", "value": "[0-3]", "isRegex": True, "isEqual": False})
    assert (m.op, m.matches(make := (("gpu", "5"),)), m.matches((("gpu", "2"),))) == (
        "!~",
        True,
        False,
    )
    assert make
    for bad in ("gpu", "=3", 'gpu="3', 'gpu=~"("'):
        with pytest.raises(ValueError):
            parse_matcher(bad)


def test_the_documented_example_is_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "alerting.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    for name in ("pagerduty.key", "webhook.url"):
        (tmp_path / name).write_text("https://example.invalid/x" if "url" in name else "k" * 32)
        example = example.replace(f"/etc/fleetd/{name}", str(tmp_path / name))
    monkeypatch.setenv("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/X")
    cfg = load_config(write(tmp_path, example)).alerting
    assert [r.name for r in cfg.receivers] == ["oncall", "chat", "am", "hook", "console"]
    assert cfg.inhibit_rules == AlertingConfig().inhibit_rules  # the doc shows the defaults
