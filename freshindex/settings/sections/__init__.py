"""The section models of :class:`settings.model.Settings`, grouped by subsystem.

``stores`` (registry, vector store, snapshots), ``pipeline`` (broker, sync,
schedules), ``ingest`` (embedding, sources), ``service`` (API, auth,
webhooks, ACL) and ``context`` (the injection client's context assembly).
Import them from :mod:`freshindex.settings` or :mod:`freshindex.settings.model`.
"""
