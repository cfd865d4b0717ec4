"""Telemetry collection: the amdsmi backend (the only importer of amdsmi) and the collectors."""
