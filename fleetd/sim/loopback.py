"""The HTTP server every stand-in (simulated vLLM workers, test receivers) serves on.

A client that hangs up mid-request is ordinary for a stand-in — a poll timed out, a test
ended — and the standard library answers it with a full traceback on stderr from the
request's thread. That is noise in every log, and on CPython 3.11 printing a traceback
parses source with ``ast`` (see ``fleetd.sim.pysource``), which races any other parse in the
process. Dropped connections pass silently; anything else is one log line.
"""

from __future__ import annotations

import logging
import sys
from http.server import ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


class LoopbackHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with daemon request threads and a one-line error report."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        log.warning("stand-in request from %s failed: %r", client_address, error)
