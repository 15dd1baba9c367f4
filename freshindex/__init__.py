"""The ``freshindex`` command line: the composition root for one-shot commands.

Importing this package has no side effects; :func:`freshindex.cli.main` is
the console script.
"""

__version__ = "0.1.0"
