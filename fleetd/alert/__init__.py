"""Alert delivery: routing, grouping, silences, inhibition, a durable outbox and notifiers.

The daemon builds one ``fleetd.alert.dispatch.Dispatcher`` and calls ``submit`` after each
rule evaluation, ``submit_change`` for remediation steps and ``tick`` from its delivery job.
The dispatcher's durable state is this package's own: ``outbox_store`` (alerts being
notified, the notification logs, the outbox, chat message refs) and ``silence_store``
(silences, acknowledgements), declared on the shared ``fleetd.store.schema.METADATA`` and
written on the caller's connection; ``memlane`` is the outbox's in-memory lane. This package
imports nothing at load time.
"""
