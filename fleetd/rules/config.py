"""The ``rules:`` section of fleetd.yaml and how it becomes a rule set and engine settings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, StrictBool, StrictInt, field_validator

from fleetd.configbase import (
    Duration,
    Span,
    StrictModel,
    check_http_url,
    documents,
    load_yaml,
    read_whole,
    validate,
)
from fleetd.errors import ConfigError
from fleetd.rules.engine import EngineSettings
from fleetd.rules.loader import RuleCheck, RuleSet, check_rule_set, load_rule_set

DEFAULT_LOCAL_DIR = Path("/etc/fleetd/rules.d")


class RulesConfig(StrictModel):
    """Which rules run, and the engine's timing.

    ``local_dir`` holds site rules: a rule there with a shipped rule's name replaces it, and
    ``disable: [Name]`` switches a shipped rule off. A missing directory means no local rules.
    """

    shipped: StrictBool = True
    """Run the rule packs shipped with fleetd."""
    packs: list[Path] = Field(default_factory=list, max_length=256)
    """Extra rule pack files or directories, loaded after the shipped ones."""
    local_dir: Path | None = DEFAULT_LOCAL_DIR
    """Site rules (`*.yaml`): a rule here with a shipped rule's name replaces it, and `disable:
    [Name]` switches a shipped rule off. A missing directory means none.
    """
    stale_polls: StrictInt = Field(default=3, ge=1, le=1000)
    """A series not updated for this many polls is stale: a rule reading it sees no data, and a GPU
    whose telemetry is stale is `unknown`, never `healthy`.
    """
    no_data_hold: Annotated[Duration, Span(0, "30d")] = 3600.0
    """How long a firing alert stays firing while its data is missing before it resolves (a GPU that
    stops answering is not taken as healed).
    """
    resolved_retention: Annotated[Duration, Span(0, "30d")] = 900.0
    """How long a resolved alert is still shown (API, fleetctl) before it is forgotten."""
    outage_tolerance: Annotated[Duration, Span(0, "30d")] = 3600.0
    """Pending alerts keep their progress towards `for` across a daemon restart shorter than this;
    after a longer outage they start over. Firing alerts stay firing whatever the outage.
    """
    for_grace_period: Annotated[Duration, Span(0, "1d")] = 60.0
    """After a restart, a pending alert of a rule whose `for` is longer than this keeps at least
    this long to go before it can fire (as Prometheus' `for_grace_period`).
    """
    runbook_base_url: str = Field(default="", max_length=2048)
    """Prefix for a rule's relative `runbook` path: `docs/runbooks/GpuMissing.md` becomes
    `<runbook_base_url>/docs/runbooks/GpuMissing.md` in the alert's `runbook_url`. Empty, or an
    http(s) URL.
    """

    @field_validator("runbook_base_url")
    @classmethod
    @documents()
    def _url_or_empty(cls, value: str) -> str:
        return check_http_url(value) if value else value


def shipped_rules_dir() -> Path:
    """Where the default packs live: ``fleetd/data/rules`` when packaged, else ``rules/``."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "data" / "rules"
    if packaged.is_dir():
        return packaged
    return package.parent / "rules"


def load_rules(config: RulesConfig) -> RuleSet:
    """Shipped packs (unless switched off), extra packs, then the local directory."""
    packs, local = _sources(config)
    return load_rule_set(packs, local, runbook_base_url=config.runbook_base_url)


def check_rules(config: RulesConfig) -> RuleCheck:
    """``load_rules`` that returns every problem and warning instead of raising."""
    packs, local = _sources(config)
    return check_rule_set(packs, local, runbook_base_url=config.runbook_base_url)


def _sources(config: RulesConfig) -> tuple[list[Path], list[Path]]:
    packs: list[Path] = [shipped_rules_dir()] if config.shipped else []
    packs.extend(config.packs)
    local = [config.local_dir] if config.local_dir is not None and config.local_dir.is_dir() else []
    return packs, local


def rules_section(path: str | Path) -> RulesConfig | None:
    """The ``rules:`` section of the fleetd.yaml at ``path`` on its own, for checking the rule
    files it names when another section of the file is wrong; None when the file is not YAML
    or the section itself is wrong (an absent section is the defaults)."""
    filename = str(path)
    try:
        text, _ = read_whole(path)
        data, marks = load_yaml(text, filename)
        section = data.get("rules") if isinstance(data, dict) else None
        return validate(RulesConfig, section, marks, filename, ("rules",))
    except (ConfigError, OSError):
        return None


def rules_to_check(path: str | Path, config: RulesConfig | None) -> tuple[RulesConfig, str]:
    """The rule files to check for the fleetd.yaml at ``path``: its ``rules:`` section when
    the file loaded (``config``) or the section alone is right, else the shipped packs only,
    and a note saying so (empty when the file's own rule files are checked)."""
    if config is not None:
        return config, ""
    section = rules_section(path)
    if section is not None:
        return section, ""
    note = (
        "rules.packs and rules.local_dir not checked: the rules: section could not be read; "
        "only the shipped packs were checked"
    )
    return RulesConfig(shipped=True, packs=[], local_dir=None), note


def engine_settings(
    config: RulesConfig, poll_interval_s: float, *, cadence: tuple[tuple[str, int], ...] = ()
) -> EngineSettings:
    """``cadence``: (metric, polls per read) of the metrics not read every poll (the slow
    tier, ``fleetd.collect.cadence.metric_cadence``), whose staleness is judged per read."""
    return EngineSettings(
        poll_interval_s=poll_interval_s,
        cadence=cadence,
        stale_polls=config.stale_polls,
        no_data_hold_s=config.no_data_hold,
        resolved_retention_s=config.resolved_retention,
        outage_tolerance_s=config.outage_tolerance,
        for_grace_period_s=config.for_grace_period,
    )
