"""Worker adapters: how a vLLM worker leaves and rejoins service (systemd units or commands)."""

from fleetd.remedy.workers.base import WorkerAdapter
from fleetd.remedy.workers.command import CommandWorkers
from fleetd.remedy.workers.systemd import SystemdWorkers

__all__ = ["CommandWorkers", "SystemdWorkers", "WorkerAdapter"]
