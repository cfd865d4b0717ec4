"""How the daemon scrapes the node's vLLM workers (kept out of fleetd/daemon.py; a top-level
module like remedy_wiring, as it composes the vllm package with the window, the store and
the exporter).

One scrape: the workers' readings go to the memory window and the store; tokens per joule
are derived against the last GPU poll (window only: they are recomputed from stored series);
the peer comparison (gray failure: a worker slower than its node peers) is judged over the
window and stored; everything scraped or derived is published on /metrics.
"""

from __future__ import annotations

import requests

from fleetd.collect.exporter import FleetdExporter
from fleetd.model import Reading, Snapshot
from fleetd.store.memory import MemoryWindow
from fleetd.store.resilient import ResilientStore
from fleetd.vllm.collector import TokensPerJouleTracker, VllmScraper
from fleetd.vllm.config import VllmConfig


class VllmWiring:
    """The scraper, the tokens-per-joule tracker and the peer comparison, as the daemon's
    ``vllm`` job runs them."""

    def __init__(self, config: VllmConfig, session: requests.Session) -> None:
        # imported here: a node without vLLM workers never loads it (docs/performance.md)
        from fleetd.vllm.peers import PeerComparison

        self.scraper = VllmScraper(config.workers, session, timeout=config.timeout)
        self.tokens = TokensPerJouleTracker(config.workers)
        self.peers = PeerComparison(
            config.workers, config.peers, scrape_interval=config.scrape_interval
        )

    @classmethod
    def build(cls, config: VllmConfig, session: requests.Session) -> VllmWiring | None:
        """None when no worker is configured (then no ``vllm`` job runs)."""
        return cls(config, session) if config.workers else None

    def scrape(
        self,
        now: float,
        *,
        memory: MemoryWindow,
        store: ResilientStore,
        exporter: FleetdExporter,
        last_snapshot: Snapshot | None,
    ) -> None:
        scrape = self.scraper.scrape(now)
        memory.append(scrape.readings)
        store.append(scrape.readings, now=now)
        derived: list[Reading] = []
        if last_snapshot is not None:
            derived = self.tokens.update(scrape.readings, last_snapshot, now)
            memory.append(derived)
        verdicts = self.peers.assess(memory, now)
        if verdicts:
            memory.append(verdicts)
            store.append(verdicts, now=now)
            derived = [*derived, *verdicts]
        exporter.update_vllm([*scrape.readings, *derived], scrape.failed_workers)
