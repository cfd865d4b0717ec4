"""persistent_ecc end to end: GPU 3's uncorrectable error (at 5 s) comes back after the hive
reset — the hive is quarantined with ONE page, fleetctl says so, and the workers stay out."""

from __future__ import annotations

from tests.e2e import expect
from tests.e2e.expect import show, triggers
from tests.e2e.runs import FAULT_GPU, HELD_ALERT, Observed


def test_one_quarantine_page_per_hive(persistent_run: Observed) -> None:
    pages = triggers(persistent_run, HELD_ALERT)
    assert len(pages) == 1, (
        f"{len(pages)} {HELD_ALERT} triggers (one per hive expected): "
        f"{[p.summary for p in pages]}; {persistent_run.describe()}"
    )
    page = pages[0]
    assert page.payload["severity"] == "critical", page.payload
    assert str(FAULT_GPU) in " ".join(str(v) for _, v in expect.walk(page.body)), page.body
    runs = persistent_run.runs
    assert runs and runs[0]["state"] == "quarantined", f"the last run is {runs[:1]}"


def test_the_quarantine_page_names_each_gpu_once(persistent_run: Observed) -> None:
    pages = triggers(persistent_run, HELD_ALERT)
    assert pages, f"no {HELD_ALERT} page; {persistent_run.describe()}"
    for page in pages:
        mentions = expect.GPU_MENTION.findall(page.summary)
        assert len(mentions) == len(set(mentions)), f"summary {page.summary!r} repeats a GPU"


def test_fleetctl_by_address_says_not_healthy(persistent_run: Observed) -> None:
    look = persistent_run.after
    assert look is not None
    why = expect.fleetctl_says_out_of_service(look.by_address.returncode, look.by_address.stdout)
    assert why is None, (
        f"fleetctl status {persistent_run.node.address} with the hive quarantined "
        f"(API {look.status['health']['state']}, "
        f"{look.status['remediation']['gpus_out_of_service']} GPUs out): {why}; "
        f"{show(look.by_address)}"
    )


def test_fleetctl_by_name_says_not_healthy(persistent_run: Observed) -> None:
    look = persistent_run.after
    assert look is not None
    why = expect.fleetctl_says_out_of_service(look.by_name.returncode, look.by_name.stdout)
    assert why is None, (
        f"fleetctl status NODE with the hive quarantined (API {look.status['health']['state']},"
        f" {look.status['remediation']['gpus_out_of_service']} GPUs out): {why}; "
        f"{show(look.by_name)}"
    )


def test_the_workers_stay_out_of_service(persistent_run: Observed) -> None:
    fleet = persistent_run.node.fleet
    serving = [name for name, w in fleet.workers.items() if w.in_rotation]
    assert not serving, (
        f"workers back in rotation on a hive whose GPU 3 keeps failing: {serving}; "
        f"{persistent_run.describe()}"
    )
    look = persistent_run.after
    assert look is not None
    held = look.status["remediation"]["held"]
    assert held, "the API shows nothing held"
    assert look.status["remediation"]["gpus_out_of_service"] == len(fleet.workers)
