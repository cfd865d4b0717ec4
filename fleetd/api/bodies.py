"""Request bodies of the mutating endpoints, validated strictly.

Every mutation says why (``reason``, required, recorded in the event log with who asked).
Unknown fields, wrong types and impossible values are a 400 naming the field, so a typo in
a script fails loudly instead of doing something else.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from fleetd.api.server import HttpError, Request
from fleetd.configbase import parse_duration

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
Seconds = Annotated[float, Field(allow_inf_nan=False, ge=0, le=1e11)]
MAX_SILENCE_S = 366 * 86400.0

B = TypeVar("B", bound="ActionBody")


class ActionBody(BaseModel):
    """Every mutation: why (required) and, optionally, which person asked."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    reason: Text
    actor: Name | None = None


class SilenceBody(ActionBody):
    """A new silence: matchers as text (``gpu="3"``) and either a duration or an end time."""

    matchers: list[Annotated[str, StringConstraints(min_length=1, max_length=512)]] = Field(
        min_length=1, max_length=32
    )
    duration: Annotated[str, StringConstraints(max_length=64)] | Seconds | None = None
    starts_at: Seconds | None = None
    ends_at: Seconds | None = None

    @model_validator(mode="after")
    def _one_end(self) -> SilenceBody:
        if (self.duration is None) == (self.ends_at is None):
            raise ValueError("give exactly one of duration or ends_at")
        if self.duration is not None:
            seconds = parse_duration(self.duration)
            if not 0 < seconds <= MAX_SILENCE_S:
                raise ValueError("duration must be more than 0 and at most 366 days")
        return self

    def window(self, now: float) -> tuple[float, float]:
        """(starts_at, ends_at) in Unix seconds."""
        start = self.starts_at if self.starts_at is not None else now
        if self.ends_at is not None:
            return start, self.ends_at
        assert self.duration is not None
        return start, start + parse_duration(self.duration)


def parse_body(request: Request, model: type[B]) -> B:
    """The request body as ``model``; HttpError(400) naming every problem otherwise."""
    data: Any = request.json()
    if not isinstance(data, dict):
        raise HttpError(400, "the request body must be a JSON object with at least 'reason'")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False, include_input=False):
            where = ".".join(str(p) for p in err["loc"]) or "body"
            message = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "missing":
                message = "required"
            elif err["type"] == "extra_forbidden":
                message = "unknown field"
            problems.append(f"{where}: {message}")
        raise HttpError(400, "invalid request body: " + "; ".join(problems)) from None
