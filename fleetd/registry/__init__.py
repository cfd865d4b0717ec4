"""The fleet registry: agents publish their status row to a shared PostgreSQL, fleetctl reads
the whole fleet from it in one query.

``fleetd.registry.store`` (RegistryPublisher, RegistryReader) needs SQLAlchemy;
``fleetd.registry.summary`` (NodeSummary, summarize) does not — fleetctl's fan-out path
imports only the latter.
"""
