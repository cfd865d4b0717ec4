"""The machine's handlers, one module per phase of a run.

``drain`` (lease, rotation, quiesce, stop, release check) → ``reset`` (reset once, reboot,
verify, burn-in; ``counters`` reads the RAS counters) → ``readmit`` (start, ready, rotation)
→ ``terminal`` (done, quarantined, aborted, rollback, cancel); ``common`` holds what they
share. A module imports only the phases after it, so there is no cycle.
"""
