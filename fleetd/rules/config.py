"""The ``rules:`` section of fleetd.yaml and how it becomes a rule set and engine settings."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from fleetd.configbase import Duration, StrictModel
from fleetd.rules.engine import EngineSettings
from fleetd.rules.loader import RuleSet, load_rule_set

DEFAULT_LOCAL_DIR = Path("/etc/fleetd/rules.d")


class RulesConfig(StrictModel):
    """Which rules run, and the engine's timing.

    ``local_dir`` holds site rules: a rule there with a shipped rule's name replaces it, and
    ``disable: [Name]`` switches a shipped rule off. A missing directory means no local rules.
    """

    shipped: bool = True
    packs: list[Path] = Field(default_factory=list)
    local_dir: Path | None = DEFAULT_LOCAL_DIR
    stale_polls: int = Field(default=3, ge=1, le=1000)
    no_data_hold: Duration = 3600.0
    resolved_retention: Duration = 900.0
    outage_tolerance: Duration = 3600.0
    for_grace_period: Duration = 60.0
    runbook_base_url: str = ""


def shipped_rules_dir() -> Path:
    """Where the default packs live: ``fleetd/data/rules`` when packaged, else ``rules/``."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "data" / "rules"
    if packaged.is_dir():
        return packaged
    return package.parent / "rules"


def load_rules(config: RulesConfig) -> RuleSet:
    """Shipped packs (unless switched off), extra packs, then the local directory."""
    packs: list[Path] = [shipped_rules_dir()] if config.shipped else []
    packs.extend(config.packs)
    local = [config.local_dir] if config.local_dir is not None and config.local_dir.is_dir() else []
    return load_rule_set(packs, local, runbook_base_url=config.runbook_base_url)


def engine_settings(config: RulesConfig, poll_interval_s: float) -> EngineSettings:
    return EngineSettings(
        poll_interval_s=poll_interval_s,
        stale_polls=config.stale_polls,
        no_data_hold_s=config.no_data_hold,
        resolved_retention_s=config.resolved_retention,
        outage_tolerance_s=config.outage_tolerance,
        for_grace_period_s=config.for_grace_period,
    )
