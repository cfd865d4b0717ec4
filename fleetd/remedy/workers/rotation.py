"""Taking a worker out of (and back into) a load balancer's rotation.

The daemon owns this signal, not vLLM's /health (integrations.md 1.2: /health stays 200
during a drain). Either a pair of commands (nginx upstream rewrite + reload, HAProxy runtime
socket through socat, …) or an HTTP call to the balancer's API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import requests

from fleetd.errors import RemedyError
from fleetd.remedy.commands import render, run_command
from fleetd.remedy.config import RotationConfig

Direction = Literal["out", "in"]


class RotationHook:
    def __init__(
        self,
        config: RotationConfig | None,
        *,
        command_timeout: float,
        session: requests.Session | None = None,
    ) -> None:
        self._config = config
        self._timeout = command_timeout
        self._session = session or requests.Session()

    @property
    def configured(self) -> bool:
        return self._config is not None and (
            self._config.http is not None or self._config.out_command is not None
        )

    def move(self, direction: Direction, values: Mapping[str, str]) -> None:
        """Run the hook; without one this is a no-op (no balancer under fleetd's control)."""
        cfg = self._config
        if cfg is None:
            return
        if cfg.http is not None:
            self._http(direction, values)
            return
        argv = cfg.out_command if direction == "out" else cfg.in_command
        if argv is not None:
            run_command(render(argv, values), timeout=self._timeout)

    def _http(self, direction: Direction, values: Mapping[str, str]) -> None:
        http = self._config.http if self._config is not None else None
        assert http is not None
        url_t = http.out_url if direction == "out" else http.in_url
        body_t = http.out_body if direction == "out" else http.in_body
        url = render([url_t], values)[0]
        body = render([body_t], values)[0] if body_t is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if http.token is not None:
            headers["Authorization"] = f"Bearer {http.token.reveal()}"
        try:
            response = self._session.request(
                http.method, url, data=body, headers=headers, timeout=http.timeout
            )
        except requests.RequestException as exc:
            raise RemedyError(
                f"rotation {direction} for {values.get('worker')}: "
                f"{type(exc).__name__} calling the load balancer"
            ) from None
        if not 200 <= response.status_code < 300:
            raise RemedyError(
                f"rotation {direction} for {values.get('worker')}: load balancer answered "
                f"HTTP {response.status_code}"
            )
