"""The remediation: section of fleetd.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.config import FleetdConfig, load_config
from fleetd.errors import ConfigError


def load(tmp_path: Path, text: str) -> tuple[Path, FleetdConfig]:
    path = tmp_path / "fleetd.yaml"
    path.write_text(text + "alerting: {receivers: [{name: c, console: [{}]}]}\n")  # required
    return path, load_config(path)


def test_defaults_are_safe(tmp_path: Path) -> None:
    _, cfg = load(tmp_path, "node: {name: n1}\n")
    rc = cfg.remediation
    assert rc.mode == "dry-run"  # a new install acts on nothing
    assert rc.reset_unit == "hive"
    assert rc.budget.max_resets == 3 and rc.budget.window == 86400
    assert rc.drain.idle_reads == 2 and rc.drain.on_timeout == "proceed"
    assert rc.reboot is None and cfg.registry.url is None
    assert rc.plans == {
        "reset": "reset",
        "quarantine": "quarantine",
        "reboot": "reboot",
        "afid": "afid",
    }


def test_yaml_on_and_off_mean_the_modes(tmp_path: Path) -> None:
    _, cfg = load(tmp_path, "remediation:\n  mode: on\n")
    assert cfg.remediation.mode == "on"
    _, cfg = load(tmp_path, "remediation:\n  mode: off\n")
    assert cfg.remediation.mode == "off"
    _, cfg = load(tmp_path, "remediation:\n  mode: On\n")
    assert cfg.remediation.mode == "on"


@pytest.mark.parametrize("word", ["yes", "true", "True", "no", "false"])
def test_other_yaml_booleans_are_not_taken_for_a_mode(tmp_path: Path, word: str) -> None:
    """``mode: yes`` used to load as ``on``, which resets GPUs: it is refused, at its line,
    with the words to write instead; the other booleans of the file are unaffected."""
    text = f"remediation:\n  proactive: {{enabled: yes}}\n  mode: {word}\n"
    text += "alerting: {receivers: [{name: c, console: [{}]}]}\n"
    path = tmp_path / "fleetd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    [problem] = caught.value.problems
    assert (problem.line, problem.key) == (3, "remediation.mode"), problem
    assert f"{word!r} is not a mode: write off, dry-run or on" in problem.message


def test_a_full_section_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LB_TOKEN", "t0ken")
    _, cfg = load(
        tmp_path,
        """
remediation:
  mode: on
  reset_unit: gpu
  plans: {reset: reset, xgmi: quarantine, noisy: none}
  budget: {max_resets: 2, window: 12h}
  probation: 30m
  drain: {balancer_delay: 20s, timeout: 2m, on_timeout: abort}
  verify:
    healthy_polls: 5
    burn_in: {command: [/opt/rvs/run, --gpus, "{gpus}"], timeout: 15m}
  readmit: {timeout: 20m, completion_check: true}
  workers:
    adapter: systemd
    rotation:
      http:
        out_url: http://lb:5555/v2/backends/vllm/servers/{worker}
        in_url: http://lb:5555/v2/backends/vllm/servers/{worker}
        method: PUT
        out_body: '{"admin_state": "drain", "node": "{node}"}'
        in_body: '{"admin_state": "ready"}'
        token_env: LB_TOKEN
  reboot: {command: [systemctl, reboot], timeout: 30m}
  fleet:
    max_gpus_out: 32
    breaker: {max_failures: 16, window: 5m}
""",
    )
    rc = cfg.remediation
    assert rc.reset_unit == "gpu" and rc.plans["noisy"] == "none"
    assert rc.budget.window == 43200 and rc.probation == 1800
    assert rc.verify.burn_in is not None and rc.verify.burn_in.timeout == 900
    assert rc.workers.rotation is not None and rc.workers.rotation.http is not None
    http = rc.workers.rotation.http
    assert http.token is not None and http.token.reveal() == "t0ken"
    assert http.method == "PUT" and str(http.token) == "<secret>"
    assert rc.fleet.max_gpus_out == 32 and rc.fleet.breaker.window == 300


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("remediation:\n  mode: maybe\n", 2, "remediation.mode: Input should be"),
        ("remediation:\n  drian: {}\n", 2, "remediation.drian: unknown key"),
        (
            "remediation:\n  workers:\n    adapter: command\n",
            2,
            "adapter 'command' needs a commands: section",
        ),
        (
            "remediation:\n  reboot: {command: [reboot, '{host}']}\n",
            2,
            "unknown placeholder {host}",
        ),
        (
            "remediation:\n  workers:\n    rotation:\n      out_command: [a]\n",
            3,
            "out_command and in_command go together",
        ),
        ("remediation:\n  budget: {max_resets: 0}\n", 2, "greater than or equal to 1"),
    ],
)
def test_bad_sections_name_file_line_and_key(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = tmp_path / "fleetd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    problems = [str(p) for p in info.value.problems]
    assert any(p.startswith(f"{path}:{line}:") and message in p for p in problems), problems


@pytest.mark.parametrize(
    "text",
    [
        "rules: {local_dir: &y yes}\nremediation: {mode: *y}\n",  # an alias
        "remediation: {mode: !!bool yes}\n",  # a tag
        "x: &d {mode: true}\nremediation: {<<: *d}\n",  # a merge
    ],
)
def test_a_boolean_mode_by_another_road_is_refused_too(tmp_path: Path, text: str) -> None:
    """The loader keeps the word only where it is written; a boolean that reaches
    ``remediation.mode`` by an alias, a tag or a merge would still have been taken as on."""
    path = tmp_path / "fleetd.yaml"
    path.write_text(text + "alerting: {receivers: [{name: c, console: [{}]}]}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    messages = [(p.key, p.message) for p in caught.value.problems]
    assert (
        "remediation.mode",
        "a YAML boolean came here by an alias, tag or merge: write the word itself",
    ) in messages, messages
