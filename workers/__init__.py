"""Celery workers and the pipeline steps they run.

This package builds no services and finds no settings of its own: the task
shells get a services factory from the application edge.  The Celery entry
point is ``celery -A freshindex.celery worker|beat`` (:mod:`freshindex.celery`);
``freshindex worker`` and ``freshindex beat`` use the same wiring and check
the registry, vector store and broker before taking tasks.
"""
