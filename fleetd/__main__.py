"""``python -m fleetd`` is the ``fleetd`` command."""

from fleetd.cli.fleetd_main import main

main()
