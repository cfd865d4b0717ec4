"""Where fleetctl finds the fleet and how it talks to it: the options every command shares.

The fleet comes from an inventory file (``--inventory``, ``$FLEETCTL_INVENTORY``) or from the
fleet registry (``--db``, ``$FLEETCTL_DB``). A node is named as in either; a command given an
address instead (``10.0.0.5:9477``, ``https://host:9443``) talks to it directly, inventory or
not: the address of a fleet member is that member, any other agent answers as itself.
"""

from __future__ import annotations

import getpass
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlsplit

import click

from fleetd.cli.fleetctl_http import ClientOptions, Target
from fleetd.cli.fleetctl_inventory import load_inventory, targets_from_address
from fleetd.cli.fleetctl_render import Painter
from fleetd.errors import ConfigError

if TYPE_CHECKING:
    from fleetd.registry.reader import RegistryReader

EXIT_OK = 0
EXIT_UNHEALTHY = 1
EXIT_UNREACHABLE = 2
EXIT_OUT_OF_SERVICE = 3  # ``status``: nothing wrong in service, but GPUs are out of it
DEFAULT_INVENTORIES = (  # ~ is the caller's home when fleetctl runs, not when it was imported
    Path("~/.config/fleetctl/inventory.yaml"),
    Path("/etc/fleetd/inventory.yaml"),
)

F = TypeVar("F", bound=Callable[..., Any])


class Fail(click.ClickException):
    """A fleetctl failure: message on stderr, and the exit code it means (1: unhealthy)."""

    exit_code = EXIT_UNHEALTHY


class Usage(Fail):
    """The command cannot be sent as given (no token for a change): exit 2, as click's usage
    errors such as a missing ``--reason``."""

    exit_code = 2


class Unreachable(Fail):
    """A node or the fleet could not be reached or found (exit 2)."""

    exit_code = EXIT_UNREACHABLE


class _Closing(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closing)


@contextmanager
def registry_session(opened: C) -> Iterator[C]:
    """``opened`` (a reader or book of the fleet registry), closed after; what the registry
    cannot read or write is ``Unreachable``."""
    from fleetd.registry.reader import RegistryError

    try:
        yield opened
    except RegistryError as exc:
        raise Unreachable(str(exc)) from None
    finally:
        opened.close()


def registry_reader(url: str, timeout: float) -> AbstractContextManager[RegistryReader]:
    """A reader of the fleet registry at ``url`` (``registry_session``)."""
    from fleetd.registry.reader import RegistryReader

    return registry_session(RegistryReader(url, timeout=timeout))


@dataclass
class Fleet:
    """The shared options, resolved."""

    inventory: Path | None
    db: str | None
    timeout: float
    token_file: Path | None
    ca_file: str | None
    colour: bool
    stale_after: float
    concurrency: int = 512
    _targets: list[Target] | None = field(default=None, repr=False)

    @property
    def painter(self) -> Painter:
        return Painter(self.colour)

    def echo(self, text: str = "") -> None:
        """Print a line; colour codes are kept only when colour is on."""
        click.echo(text, color=self.colour)

    def options(self, *, with_token: bool = False) -> ClientOptions:
        return ClientOptions(
            timeout=self.timeout,
            token=self.token() if with_token else None,
            ca_file=self.ca_file,
            concurrency=self.concurrency,
        )

    def token(self) -> str:
        """The bearer token for changes: ``--token-file``, or ``$FLEETCTL_TOKEN``."""
        if self.token_file is not None:
            try:
                text = self.token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise Usage(
                    f"cannot read the token file {self.token_file}: {exc.strerror}"
                ) from None
            if not text:
                raise Usage(f"the token file {self.token_file} is empty")
            return text
        env = os.environ.get("FLEETCTL_TOKEN")
        if env:
            return env.strip()
        raise Usage("this command changes things: give --token-file FILE (or $FLEETCTL_TOKEN)")

    def targets(self) -> list[Target]:
        """Every agent of the fleet (inventory file or registry)."""
        if self._targets is None:
            self._targets = self._load_targets()
        return self._targets

    def _load_targets(self) -> list[Target]:
        if self.inventory is not None:
            try:
                return load_inventory(self.inventory)
            except ConfigError as exc:
                raise Unreachable(str(exc)) from None
        if self.db is not None:
            with registry_reader(self.db, self.timeout) as reader:
                nodes = reader.fleet(time.time(), stale_after=self.stale_after)
            return [Target(n.summary.node, n.address) for n in nodes if n.address]
        looked = " or ".join(str(path) for path in DEFAULT_INVENTORIES)
        raise Unreachable(
            "no fleet: give --inventory FILE or --db URL "
            f"(or set $FLEETCTL_INVENTORY / $FLEETCTL_DB; no inventory at {looked})"
        )

    def resolve(self, node: str) -> Target:
        """The agent of ``node``: by name from the fleet, or ``node`` itself as an address
        (``HOST:PORT``, ``http(s)://HOST[:PORT]``). An address of a fleet member is that
        member (its name is checked as usual); any other address is asked without a name,
        and an address works even when the inventory or registry cannot be read."""
        address = _address_target(node)
        if self.inventory is not None or self.db is not None:
            try:
                known = self.targets()
            except Unreachable:
                if address is None:
                    raise
                known = []
            for target in known:
                if target.name == node:
                    return target
            if address is not None:
                for target in known:
                    if _same_agent(target.url, address.url):
                        return target
        if address is not None:
            return address
        where = "the inventory" if self.inventory is not None else "the registry"
        if self.inventory is None and self.db is None:
            where = "any inventory (give --inventory FILE or --db URL, or an address host:port)"
        raise Unreachable(f"unknown node {node!r}: not in {where}")


def _address_target(node: str) -> Target | None:
    """``node`` as an agent address, or None when it is a name; Unreachable when it looks
    like an address but is not one (a range, a bad port)."""
    if ":" not in node and not node.startswith(("http://", "https://")):
        return None
    try:
        found = targets_from_address(node)
    except ValueError as exc:
        raise Unreachable(str(exc)) from None
    if len(found) != 1:
        raise Unreachable(f"{node!r} names {len(found)} agents: give one address")
    return Target(node, found[0].url, name_known=False)


def _same_agent(a: str, b: str) -> bool:
    """Two base URLs of one agent (scheme, host and port; host names compare without case)."""
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, (pa.hostname or "").lower(), pa.port) == (
        pb.scheme,
        (pb.hostname or "").lower(),
        pb.port,
    )


def actor() -> str:
    """Who is asking, as the agents record it: ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:128]


def _default_inventory() -> Path | None:
    for path in DEFAULT_INVENTORIES:
        candidate = path.expanduser()
        if candidate.is_file():
            return candidate
    return None


def fleet_options(func: F) -> F:
    """The options every fleetctl command takes (also from the environment)."""
    options = [
        click.option(
            "--inventory",
            "-i",
            type=click.Path(dir_okay=False, path_type=Path),
            envvar="FLEETCTL_INVENTORY",
            help="YAML list of agents (ranges like gpu-node-[001-128]:9477). "
            "[env FLEETCTL_INVENTORY]",
        ),
        click.option(
            "--db",
            envvar="FLEETCTL_DB",
            help="Fleet registry URL (PostgreSQL). [env FLEETCTL_DB]",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(0.05, 300),
            default=3.0,
            show_default=True,
            envvar="FLEETCTL_TIMEOUT",
            help="Seconds each node has to answer.",
        ),
        click.option(
            "--token-file",
            type=click.Path(dir_okay=False, path_type=Path),
            envvar="FLEETCTL_TOKEN_FILE",
            help="File holding the API token (for changes). [env FLEETCTL_TOKEN_FILE]",
        ),
        click.option(
            "--ca-file",
            type=click.Path(dir_okay=False, exists=True),
            envvar="FLEETCTL_CA_FILE",
            help="CA bundle to verify agents' TLS certificates.",
        ),
        click.option(
            "--color/--no-color",
            "colour",
            default=None,
            help="Colour the output (default: when stdout is a terminal and NO_COLOR is unset).",
        ),
        click.option(
            "--stale-after",
            type=click.FloatRange(1, 86400),
            default=60.0,
            show_default=True,
            envvar="FLEETCTL_STALE_AFTER",
            help="Registry heartbeats older than this many seconds are stale.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def make_fleet(
    inventory: Path | None,
    db: str | None,
    timeout: float,
    token_file: Path | None,
    ca_file: str | None,
    colour: bool | None,
    stale_after: float,
) -> Fleet:
    if colour is None:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    if inventory is None and db is None:
        inventory = _default_inventory()
    return Fleet(inventory, db, timeout, token_file, ca_file, colour, stale_after)
