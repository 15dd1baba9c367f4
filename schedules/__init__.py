"""Periodic work for Celery beat: source polls (:mod:`schedules.plan`), the freshness sweep
(:mod:`schedules.sweep`), registry/index reconciliation (:mod:`schedules.reconcile`), tombstone GC
and snapshot retention (:mod:`schedules.gc`), and the reaper that recovers runs whose worker died
(:mod:`schedules.reaper`).  :mod:`schedules.beat` holds the cadence."""
