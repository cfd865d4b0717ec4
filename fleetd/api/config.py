"""The ``api:`` section of fleetd.yaml: who may change things, and how much history reads show.

Where the API listens (bind address, port, TLS) is ``http:``; the API shares that server with
/metrics and /healthz. Reads are open on the bind address (127.0.0.1 by default); every
mutation needs the bearer token, kept out of the YAML with ``token_file`` or ``token_env``.
Without a token the API is read-only: mutations are refused, never allowed by default.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt, field_validator

from fleetd.configbase import Duration, Secret, Span, StrictModel, documents


class ApiConfig(StrictModel):
    """Authentication of mutations and the size of history answers."""

    token: Secret | None = None
    """Bearer token that every change through the API needs (at least 16 characters). Without one
    the API is read-only.
    """
    token_name: str = Field(default="operator", min_length=1, max_length=64)
    """The token's name, recorded with every change it makes (the token itself never is)."""
    history_window: Annotated[Duration, Span(0, "30d")] = 3600.0
    """Default window of the GPU detail history."""
    history_points: StrictInt = Field(default=240, ge=2, le=10_000)
    """Most points per series in a history answer."""
    max_history_window: Annotated[Duration, Span(0, "365d")] = 7 * 86400.0
    """Longest history window a request may ask for."""

    @field_validator("token")
    @classmethod
    @documents("the API token must be at least 16 characters")
    def _token_strength(cls, value: Secret | None) -> Secret | None:
        if value is not None and len(value.reveal()) < 16:
            raise ValueError("the API token must be at least 16 characters")
        return value

    @field_validator("history_window", "max_history_window")
    @classmethod
    @documents("must be greater than zero")
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than zero")
        return value
