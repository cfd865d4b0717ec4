"""Who may change things: the bearer token check and the identity recorded with each action.

Reads are open on the bind address. A mutation needs ``Authorization: Bearer <token>``; the
token is compared in constant time (``hmac.compare_digest``), so response timing does not
leak how much of a guess was right. Without a configured token every mutation is refused:
an agent is read-only until an operator gives it a token. The token itself never appears in
a log line, an error or the event log — only its name does.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fleetd.api.server import HttpError, Request
from fleetd.configbase import Secret

_CHALLENGE = (("WWW-Authenticate", 'Bearer realm="fleetd"'),)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asked for an action: the token's name, the user they said they are, their address."""

    token: str
    client: str
    user: str | None = None

    def describe(self) -> str:
        """``alice (token operator, 10.0.0.5)``: what the event log and runs record as *who*."""
        who = self.user or "unknown user"
        return f"{who} (token {self.token}, {self.client})"


class TokenAuth:
    """Checks the bearer token of mutating requests."""

    def __init__(self, token: Secret | None, name: str = "operator") -> None:
        self._expected = token.reveal().encode() if token is not None and token else None
        self.name = name

    @property
    def enabled(self) -> bool:
        return self._expected is not None

    def check(self, request: Request) -> str:
        """The token's name when the request carries the right token; else HttpError."""
        if self._expected is None:
            raise HttpError(
                403,
                "changes are disabled on this agent: no API token is configured "
                "(set api.token_file in fleetd.yaml)",
            )
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise HttpError(
                401, "this action needs 'Authorization: Bearer <token>'", headers=_CHALLENGE
            )
        if not hmac.compare_digest(given.strip().encode(), self._expected):
            raise HttpError(401, "invalid token", headers=_CHALLENGE)
        return self.name
