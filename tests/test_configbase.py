"""The strict YAML loader: line marks, every error at once, secrets never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.config import load_config
from fleetd.configbase import Secret, StrictModel, format_duration, parse_duration
from fleetd.errors import ConfigError

ALERTING = "alerting: {receivers: [{name: console, console: [{}]}]}\n"  # a file needs it


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleetd.yaml"
    path.write_text(text)
    return path


def test_every_problem_is_reported_with_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "poll:\n  interval: 0.5s\n  bogus: 1\nhttp:\n  port: abc\n" + ALERTING)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    lines = str(info.value).splitlines()
    assert f"{path}:2:3: poll.interval: poll interval must be between 1s and 1h" in lines
    assert f"{path}:3:3: poll.bogus: unknown key" in lines
    assert any(line.startswith(f"{path}:5:3: http.port:") for line in lines)
    assert len(lines) == 3


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "poll:\n  interval: [1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}:3:")


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "poll:\n  interval: 5\n  interval: 6\n")
    with pytest.raises(ConfigError, match=r":3:3: poll.interval: duplicate key"):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.yaml"
    path.write_bytes(b"node: {name: \xff\xfe}\n")
    with pytest.raises(ConfigError, match=f"{path}:1:14: not UTF-8 text \\(byte 0xff\\)"):
        load_config(path)


def test_a_minimal_file_gives_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ALERTING))
    assert config.poll.interval == 5.0
    assert config.http.bind == "127.0.0.1"
    assert [r.name for r in config.alerting.receivers] == ["console"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), (7, 7), ("2d", 172800)],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "5", "5x", "m5", -1, True, "1h 5m"])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_format_duration_round_trips() -> None:
    for seconds in (1, 59, 60, 3600, 5400, 90061, 0.25):
        assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


class _WithSecret(StrictModel):
    token: Secret | None = None


def test_secret_never_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _WithSecret.model_validate({"token": "hunter2"})
    assert model.token is not None and model.token.reveal() == "hunter2"
    assert "hunter2" not in repr(model) and "hunter2" not in str(model)
    assert "hunter2" not in model.model_dump_json()


def test_secret_from_file_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret_file = tmp_path / "token"
    secret_file.write_text("from-file\n")
    model = _WithSecret.model_validate({"token_file": str(secret_file)})
    assert model.token is not None and model.token.reveal() == "from-file"
    monkeypatch.setenv("FLEETD_TEST_TOKEN", "from-env")
    model = _WithSecret.model_validate({"token_env": "FLEETD_TEST_TOKEN"})
    assert model.token is not None and model.token.reveal() == "from-env"


def test_secret_sources_are_exclusive_and_errors_do_not_leak(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="only one of"):
        _WithSecret.model_validate({"token": "hunter2", "token_env": "X"})
    with pytest.raises(ValueError, match="cannot read") as info:
        _WithSecret.model_validate({"token_file": str(tmp_path / "none")})
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("section", ["store", "registry"])
@pytest.mark.parametrize(
    "url",
    [
        "postgresql://fleet:hunter2secret@db:notaport/fleet",
        "postgresql//fleet:hunter2secret@db/fleet",
        "postgresql+nodriver://fleet:hunter2secret@db/fleet",
    ],
)
def test_a_bad_database_url_is_a_config_error_that_never_shows_it(
    tmp_path: Path, section: str, url: str
) -> None:
    path = write(tmp_path, f"{section}:\n  url: {url!r}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert f"{section}.url" in text and "hunter2secret" not in text


# ------------------------------------------------------------------------------ a whole file
def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_an_empty_file_is_an_error_not_the_defaults(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    assert problems(path) == [f"{path}:1:1: the file is empty: it needs at least alerting:"]


@pytest.mark.parametrize(
    ("text", "what"),
    [("- node\n- poll\n", "a list"), ("just text\n", "the single value 'just text'")],
)
def test_a_file_that_is_not_a_mapping_says_so_with_its_position(
    tmp_path: Path, text: str, what: str
) -> None:
    path = write(tmp_path, text)
    assert problems(path) == [f"{path}:1:1: the file must be a mapping of sections, not {what}"]


def test_alerting_and_its_receivers_are_required_in_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, "node: {name: n1}\npoll: {interval: 0s}\n")
    assert problems(path) == [
        f"{path}:2:8: poll.interval: poll interval must be between 1s and 1h",
        f"{path}:1:1: alerting: required in a config file (a section)",
    ]
    path = write(tmp_path, "node: {name: n1}\nalerting:\n  route: {receiver: console}\n")
    assert problems(path) == [f"{path}:2:1: alerting.receivers: required in a config file"]
    path = write(tmp_path, "alerting: {receivers: []}\n")
    assert "at least one receiver is required" in problems(path)[0]


def test_the_built_in_config_stays_lenient() -> None:
    from fleetd.config import FleetdConfig

    assert [r.name for r in FleetdConfig().alerting.receivers] == ["console"]


def test_a_file_cut_mid_line_is_an_error_at_its_end_with_the_other_problems(
    tmp_path: Path,
) -> None:
    # "registry: {heartbeat_interval: 15s}" cut after "1": still a valid value
    path = write(tmp_path, ALERTING + "http: {port: true}\nregistry:\n  heartbeat_interval: 1")
    assert problems(path) == [
        f"{path}:4:24: the file ends without a line break, as if cut short; if it is "
        "complete, end the last line with a newline",
        f"{path}:2:8: http.port: Input should be a valid integer",
    ]


@pytest.mark.parametrize("cut", [40, 41, 60, 90])
def test_truncations_of_a_valid_file_never_pass(tmp_path: Path, cut: int) -> None:
    text = "node: {name: n1}\nstate_dir: /var/lib/fleetd\n" + ALERTING
    assert load_config(write(tmp_path, text)).state_dir == Path("/var/lib/fleetd")
    path = write(tmp_path, text[:cut])
    assert problems(path)


def test_scenario_needs_the_simulator(tmp_path: Path) -> None:
    path = write(tmp_path, ALERTING + "backend: {kind: amdsmi, scenario: demo}\n")
    assert problems(path) == [
        f"{path}:2:25: backend.scenario: scenario needs kind: simulator (or fleetd run --simulate)"
    ]
    config = load_config(write(tmp_path, ALERTING + "backend: {kind: simulator, scenario: demo}\n"))
    assert config.backend.scenario == "demo"


# ------------------------------------------------------------------------------ the bounded loader
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_an_alias_bomb_stops_fast_with_its_position(tmp_path: Path) -> None:
    import time
    import tracemalloc

    path = write(tmp_path, BOMB)
    assert len(BOMB.encode()) < 600
    tracemalloc.start()
    started = time.perf_counter()
    found = problems(path)
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(found) == 1 and "more than 20000 values once aliases are expanded" in found[0]
    assert found[0].startswith(f"{path}:5:")
    assert elapsed < 5 and peak < 64 * 1024**2, (elapsed, peak)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: " + "[" * 600 + "]" * 600 + "\n", ": nested deeper than 50 levels"),
        ("a: &x [1, *x]\n", ":1:11: a[1]: alias *x is recursive"),
        ("a: &x {b: {c: *x}}\n", ":1:15: a.b.c: alias *x is recursive"),
        ("a: *nowhere\n", ":1:4: a: alias *nowhere has no anchor"),
        (
            "a: &x 1\n" + "b: [" + ", ".join(["*x"] * 1001) + "]\n",
            ": b[1000]: more than 1000 aliases",
        ),
        ("a: 2001-13-45\n", ":1:4: a: invalid !!timestamp value: month must be in 1..12"),
        ("a: !!python/object:os.system x\n", ":1:4: a: unsupported YAML tag !!python/object"),
        ("a: !!int ten\n", ":1:4: a: invalid !!int value"),
        ("a: {[1]: x}\n", ":1:5: a: keys must be scalars"),
        ("a: 1\n---\nb: 2\n", ":2:1: a second YAML document (---)"),
        ("a: b\x00c\n", ":1:5: a NUL byte is not allowed in YAML text"),
        ("a: b\x1bc\n", ":1:5: control character U+001B is not allowed"),
    ],
)
def test_hostile_yaml_is_a_positioned_error(tmp_path: Path, text: str, expected: str) -> None:
    found = problems(write(tmp_path, text))
    assert any(expected in p for p in found), found


def test_alias_nesting_is_bounded(tmp_path: Path) -> None:
    chain = "a: &a 1\n" + "".join(
        f"{n}: &{n} [*{p}]\n" for p, n in zip("abcde", "bcdef", strict=True)
    )
    found = problems(write(tmp_path, chain + "g: *f\n"))
    assert any("g: aliases nested more than 5 deep" in p for p in found), found


def test_files_that_are_too_large_or_not_utf8_text(tmp_path: Path) -> None:
    from fleetd.configbase import MAX_FILE_BYTES

    path = tmp_path / "fleetd.yaml"
    path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    assert problems(path) == [f"{path}: larger than 1024 KiB"]
    path.write_bytes("a: b\n".encode("utf-16"))
    assert problems(path) == [f"{path}:1:1: UTF-16 text (byte order mark): save the file as UTF-8"]
    path.write_bytes(b"node:\n  name: caf\xe9\n")
    assert problems(path) == [f"{path}:2:12: not UTF-8 text (byte 0xe9): save the file as UTF-8"]
    path.write_bytes(b"\xef\xbb\xbf" + ALERTING.encode())  # a UTF-8 BOM is allowed
    assert load_config(path).alerting.receivers[0].name == "console"


def test_merge_keys_merge_and_point_at_where_a_value_is_written(tmp_path: Path) -> None:
    text = (
        ALERTING + "vllm:\n  workers:\n"
        "    - &w {name: w0, url: 'http://127.0.0.1:8000', gpus: [0], model: m}\n"
        "    - <<: *w\n      name: w1\n      gpus: [1]\n"
        "    - {<<: [{url: 'ftp://x'}, *w], name: w2, gpus: [2]}\n"
    )
    found = problems(write(tmp_path, text))
    assert len(found) == 1 and ":8:14: vllm.workers[2].url: must be an http" in found[0]
    config = load_config(write(tmp_path, text.replace("ftp://x", "http://127.0.0.1:8002")))
    _, w1, w2 = config.vllm.workers
    assert (w1.name, w1.url, w1.gpus, w1.model) == ("w1", "http://127.0.0.1:8000", [1], "m")
    assert (w2.name, w2.url, w2.model) == ("w2", "http://127.0.0.1:8002", "m")
    from fleetd.configbase import load_yaml

    data, _ = load_yaml("l: &l [{a: 1}, {a: 2, b: 3}]\nm: {<<: *l, c: 4}\n", "f.yaml")
    assert data["m"] == {"a": 1, "b": 3, "c": 4}  # an alias of a list of mappings merges too
    path = write(tmp_path, ALERTING + "node:\n  <<: [1]\n")
    assert problems(path) == [
        f"{path}:3:8: node.<<: a merge key (<<) takes a mapping, an alias of one, or a list of them"
    ]


# ------------------------------------------------------------------------------ values
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http: {port: true}\n", "http.port: Input should be a valid integer"),
        ("http: {port: 65536}\n", "http.port: Input should be less than or equal to 65535"),
        ("http: {bind: 999.1.1.1}\n", "http.bind: '999.1.1.1' is not a valid IP address"),
        ("http: {bind: 'my host'}\n", "http.bind: 'my host' is not a valid host name"),
        ("rules: {runbook_base_url: 'ftp://x'}\n", "rules.runbook_base_url: must be an http"),
        ("registry: {address: 'http://n1:99999'}\n", "invalid port number"),
        ("remediation: {verify: {healthy_polls: 1e21}}\n", "healthy_polls: Input should be a"),
        ("remediation: {verify: {healthy_polls: 1.0e+21}}\n", "healthy_polls: Input should be a"),
        ("remediation: {verify: {healthy_polls: 101}}\n", "less than or equal to 100"),
        ("remediation: {drain: {timeout: 10000w}}\n", "cannot be longer than 3650d"),
        ("remediation: {drain: {timeout: 30d}}\n", "drain.timeout: must be at most 1d"),
        ("poll: {gpu_timeout: .inf}\n", "poll.gpu_timeout: a duration must be a finite number"),
        ("node: {name: " + "n" * 100_000 + "}\n", "node.name: String should have at most 128"),
        ("node: {name: 'gpu node/1'}\n", "node.name: String should match pattern"),
        ("rules: {shipped: 'yes'}\n", "rules.shipped: Input should be a valid boolean"),
        ("rules: {shipped: 1}\n", "rules.shipped: Input should be a valid boolean"),
        ("state_dir: var/lib/fleetd\n", "state_dir: state_dir must be an absolute path"),
    ],
)
def test_lax_values_are_errors(tmp_path: Path, text: str, expected: str) -> None:
    found = problems(write(tmp_path, ALERTING + text))
    assert len(found) == 1 and expected in found[0], found


def test_gpu_lists_are_indexes_unique_and_bounded(tmp_path: Path) -> None:
    worker = "vllm:\n  workers:\n    - {name: w, url: 'http://127.0.0.1:8000', gpus: %s}\n"
    path = write(tmp_path, ALERTING + worker % "[3, 3, -1]")
    assert problems(path) == [  # the list's own check too, though an item of it is wrong
        f"{path}:4:60: vllm.workers[0].gpus[2]: Input should be greater than or equal to 0",
        f"{path}:4:47: vllm.workers[0].gpus: GPU indexes must be unique: [3] more than once",
    ]
    path = write(tmp_path, ALERTING + worker % "[99999]")
    assert "less than or equal to 1023" in problems(path)[0]


def test_gpus_the_node_lacks_are_warnings() -> None:
    from fleetd.config import FleetdConfig, absent_gpus

    config = FleetdConfig.model_validate(
        {"vllm": {"workers": [{"name": "w", "url": "http://127.0.0.1:1", "gpus": [0, 9]}]}}
    )
    assert absent_gpus(config, set(range(8))) == ["vllm worker 'w': no GPU [9] on this node"]
    assert absent_gpus(config, set(range(10))) == []


def test_secret_urls_are_checked_without_showing_them(tmp_path: Path) -> None:
    hook = "alerting:\n  receivers:\n    - name: h\n      webhook: [{url: 'ftp://hunter2@x'}]\n"
    found = problems(write(tmp_path, hook))
    assert len(found) == 1 and "alerting.receivers[0].webhook[0].url: must be an http" in found[0]
    assert "hunter2" not in found[0]


def test_yaml_on_and_off_still_mean_remediation_modes(tmp_path: Path) -> None:
    assert (
        load_config(write(tmp_path, ALERTING + "remediation: {mode: on}\n")).remediation.mode
        == "on"
    )


# ------------------------------------------------------------------ every problem at once
def test_cross_field_checks_are_reported_with_field_errors(tmp_path: Path) -> None:
    text = (
        "alerting:\n  receivers:\n"
        "    - {name: chat, slack: [{webhook_url: 'https://hooks.example/x', max_alerts: 99}]}\n"
        "  route: {receiver: nobody}\n"
        "registry: {heartbeat_interval: 30s, stale_after: 45s, timeout: forever}\n"
        "store: {raw_retention: 10m, chunk_span: 90s}\n"
    )
    found = problems(write(tmp_path, text))
    assert any("max_alerts: Input should be less than or equal to 40" in p for p in found)
    assert any(
        "4:11: alerting.route.receiver: must name a receiver (unknown receiver 'nobody'" in p
        for p in found
    )
    assert any("registry.timeout: invalid duration" in p for p in found)
    assert any("registry.stale_after: stale_after must be at least twice" in p for p in found)
    assert any("store.raw_retention: raw_retention must be at least 1h" in p for p in found)
    assert any("store.chunk_span: chunk_span must be a whole number" in p for p in found)
    assert len(found) == 6, found


def test_a_check_whose_input_is_wrong_stays_quiet(tmp_path: Path) -> None:
    """heartbeat_interval is wrong: stale_after is not compared with a stand-in default."""
    found = problems(
        write(tmp_path, ALERTING + "registry: {heartbeat_interval: x, stale_after: 20s}\n")
    )
    assert len(found) == 1 and "registry.heartbeat_interval: invalid duration" in found[0]


def test_the_daemon_warns_at_start_of_worker_gpus_the_node_lacks(tmp_path: Path) -> None:
    import structlog

    from fleetd.clock import FakeClock
    from fleetd.collect.amdsmi_backend import AmdSmiBackend
    from fleetd.config import FleetdConfig
    from fleetd.daemon import Daemon, SimContext
    from fleetd.sim import SimulatedAmdSmi, build_node

    clock = FakeClock()
    node = build_node("MI355X", seed=1, clock=clock)  # GPUs 0-7
    worker = {"name": "w", "url": "http://127.0.0.1:9", "gpus": [7, 8]}
    config = FleetdConfig.model_validate(
        {
            "node": {"name": "n1"},
            "state_dir": str(tmp_path),
            "http": {"port": 0},
            "rules": {"local_dir": None},
            "vllm": {"workers": [worker]},
        }
    )
    daemon = Daemon(
        config,
        clock=clock,
        backend=AmdSmiBackend(SimulatedAmdSmi(node)),
        sim=SimContext(node, None),
        schedule_jobs=False,
    )
    with structlog.testing.capture_logs() as logs:
        daemon.start()
        daemon.stop()
    warnings = [e for e in logs if e["event"] == "config_gpu_absent"]
    assert [e["detail"] for e in warnings] == ["vllm worker 'w': no GPU [8] on this node"]


def test_an_unreadable_secret_file_is_reported_at_its_own_key(tmp_path: Path) -> None:
    """The reader of ``token_file`` runs in the section's own check; its problem is put at the
    ``token_file`` line, not at the section's (which may be far above it)."""
    text = ALERTING + "api:\n  listen: 127.0.0.1:0\n\n  token_file: /nonexistent/api-token\n"
    [problem] = problems(write(tmp_path, text))
    line = text.splitlines().index("  token_file: /nonexistent/api-token") + 1
    assert problem.startswith(
        f"{tmp_path / 'fleetd.yaml'}:{line}:3: api.token_file: cannot read"
    ), problem
