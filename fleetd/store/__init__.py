"""Local storage: time series with rollups, the event log, alert state, outbox and run journal."""
