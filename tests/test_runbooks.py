"""Every alert fleetd can raise has a runbook: the shipped rule packs' alerts and the ones
fleetd raises itself (remediation, delivery). `fleetctl explain` and the pages point there."""

from __future__ import annotations

from pathlib import Path

import yaml

from fleetd.alert.config import REMEDIATION_ALERT
from fleetd.alert.hooks import SELF_ALERT
from fleetd.remedy.notify import BREAKER_ALERT, HELD_ALERT

ROOT = Path(__file__).resolve().parents[1]
RUNBOOKS = ROOT / "docs" / "runbooks"


def shipped_alerts() -> set[str]:
    names = {REMEDIATION_ALERT, HELD_ALERT, BREAKER_ALERT, SELF_ALERT}
    for pack in sorted((ROOT / "rules").glob("*.yaml")):
        for rule in yaml.safe_load(pack.read_text(encoding="utf-8"))["rules"]:
            names.add(rule["name"])
    return names


def test_every_shipped_alert_has_a_runbook() -> None:
    missing = sorted(n for n in shipped_alerts() if not (RUNBOOKS / f"{n}.md").is_file())
    assert missing == []


def test_every_runbook_belongs_to_an_alert_and_says_what_it_means() -> None:
    alerts = shipped_alerts()
    for page in sorted(RUNBOOKS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        assert page.stem in alerts, f"{page.name}: no such alert"
        assert text.startswith(f"# {page.stem}\n") and "## What it means" in text, page.name


def test_the_list_of_alerts_is_not_empty() -> None:  # the check above cannot pass vacuously
    assert {"GpuEccUncorrectableError", "GpuRemediationHeld"} <= shipped_alerts()
