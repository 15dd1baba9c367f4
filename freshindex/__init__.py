"""freshindex: batch indexing and freshness for RAG knowledge bases.

Every part installs under this namespace: ``freshindex.settings``,
``freshindex.workers``, ``freshindex.injection`` and so on.  In a source
checkout the parts are folders at the repository's top level (the design
card's layout); the lines below let ``freshindex.<part>`` find them there.
An installed wheel holds them inside this package, and the lines do nothing.
Importing this package has no side effects beyond that; the console script is
:func:`freshindex.cli.main`.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "workers" / "__init__.py").is_file():
    __path__.append(str(_checkout))
del _Path, _checkout
