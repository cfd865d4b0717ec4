"""The ``store:`` section of fleetd.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.config import load_config
from fleetd.errors import ConfigError
from fleetd.store.config import StoreConfig


def test_defaults_match_the_documented_tiers() -> None:
    cfg = StoreConfig()
    assert (cfg.raw_retention, cfg.rollup_1m_retention, cfg.rollup_1h_retention) == (
        86_400,
        30 * 86_400,
        365 * 86_400,
    )
    assert (
        cfg.database_url(Path("/var/lib/fleetd")).reveal() == "sqlite:////var/lib/fleetd/fleetd.db"
    )


def test_section_loads_from_fleetd_yaml(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.yaml"
    path.write_text(
        "store:\n  path: /data/fleetd.db\n  raw_retention: 12h\n  disk_budget_bytes: 536870912\n"
        "alerting: {receivers: [{name: console, console: [{}]}]}\n"  # a file needs it
    )
    cfg = load_config(path).store
    assert cfg.raw_retention == 12 * 3600
    assert cfg.disk_budget_bytes == 512 * 1024**2
    assert cfg.database_url(tmp_path).reveal() == "sqlite:////data/fleetd.db"


def test_url_is_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.yaml"
    path.write_text(
        "store:\n  url: postgresql://fleetd:hunter2@db/fleetd\n"
        "alerting: {receivers: [{name: console, console: [{}]}]}\n"  # a file needs it
    )
    cfg = load_config(path).store
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg.model_dump())
    assert cfg.database_url(tmp_path).reveal().endswith("@db/fleetd")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("store:\n  raw_retention: 10m\n", "raw_retention must be at least 1h"),
        ("store:\n  chunk_span: 90s\n", "chunk_span must be a whole number of minutes"),
        ("store:\n  rollup_1h_retention: 10d\n", "rollup_1h_retention must be at least"),
        ("store:\n  retention: 1d\n", "unknown key"),
    ],
)
def test_bad_values_name_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fleetd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problem = caught.value.problems[0]
    assert message in problem.message
    assert problem.file == str(path) and problem.line is not None
    assert problem.key.startswith("store")
