"""The strict YAML loader: line marks, every error at once, secrets never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.config import load_config
from fleetd.configbase import Secret, StrictModel, format_duration, parse_duration
from fleetd.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleetd.yaml"
    path.write_text(text)
    return path


def test_every_problem_is_reported_with_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "poll:\n  interval: 0.5s\n  bogus: 1\nhttp:\n  port: abc\n")
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
    with pytest.raises(ConfigError, match=f"{path}: not UTF-8 text"):
        load_config(path)


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""))
    assert config.poll.interval == 5.0
    assert config.http.bind == "127.0.0.1"


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
