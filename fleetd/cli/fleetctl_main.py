"""``fleetctl``: the SRE's view of the fleet (status, alerts, silences, drain, explain).

See ``fleetctl status --help`` for the exit codes scripts rely on: 0 all healthy and in
service, 1 some node not healthy, 2 some node unreachable, 3 GPUs out of service.
"""

from __future__ import annotations

import click

from fleetd import __version__
from fleetd.cli.fleetctl_commands import COMMANDS
from fleetd.cli.fleetctl_evidence import evidence_command
from fleetd.cli.fleetctl_report import report_command
from fleetd.cli.fleetctl_rma import rma_group
from fleetd.cli.fleetctl_status import status_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleetctl")
def main() -> None:
    """fleetctl — see and act on a fleet of fleetd agents.

    The fleet comes from an inventory file (--inventory, $FLEETCTL_INVENTORY) or from the
    fleet registry (--db, $FLEETCTL_DB). Changes need the API token (--token-file) and a
    --reason, recorded on the node with your user name.
    """


main.add_command(status_command)
main.add_command(evidence_command)
main.add_command(rma_group)
main.add_command(report_command)
for command in COMMANDS:
    main.add_command(command)


if __name__ == "__main__":
    main()
