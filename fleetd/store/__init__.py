"""Local storage substrate: time series with rollups, the event log, the database and its schema.

The store knows no domain type: alerting (``fleetd.alert.outbox_store``,
``fleetd.alert.silence_store``), rules (``fleetd.rules.state_store``) and remediation
(``fleetd.remedy.journal``) keep their own tables on ``schema.METADATA`` and write them with
``upsert.upsert`` on a connection from ``db.Database.begin``.

The daemon builds (see each module):

* ``memory.MemoryWindow(retention)`` — the recent window rules evaluate against every tick;
* ``resilient.ResilientStore(url, StoreConfig, node=…)`` — the database handle: ``append``
  per poll, ``maintenance(now)`` as a scheduled job, ``append_event``, ``health()``,
  ``stats()``; never raises storage errors into the poll loop;
* ``hybrid.HybridQuery(memory, store)`` — the ``fleetd.query.Query`` rules, the API and
  fleetctl use; ``hybrid.warm_memory(memory, store, now=…)`` at start-up.

Underneath: ``db.Database`` (engine, WAL, schema versions), ``samples.SampleStore`` (writes
and reads over the raw, 1-minute and 1-hour tiers), ``maintenance.Maintenance`` (compaction,
rollups, retention, disk budget), ``events.EventLog``, ``functions`` (window maths shared by
memory and database), ``codec`` (compressed chunks), ``upsert`` (insert-or-update by key).
"""
