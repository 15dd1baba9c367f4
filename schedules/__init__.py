"""Periodic work for Celery beat: source polls (and, as they land, freshness
sweeps, orphan reconciliation, tombstone GC, ACL refresh, retention), and the
reaper that recovers runs whose worker died (:mod:`schedules.reaper`)."""
