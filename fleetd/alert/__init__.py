"""Alert delivery: routing, grouping, silences, inhibition, a durable outbox and notifiers.

The daemon builds one ``fleetd.alert.dispatch.Dispatcher`` and calls ``submit`` after each
rule evaluation, ``submit_change`` for remediation steps and ``tick`` from its delivery job.
This package imports nothing at load time: ``fleetd.store.outbox`` imports its value types,
and the store must be importable on its own.
"""
