"""Engine creation and schema migrations.

Opening a registry checks its schema revision against the head of the
migration chain. That check reads the revision lines of the migration files
and the ``alembic_version`` row directly, so a command that only reads the
registry never imports Alembic (it costs about half a second); Alembic is
imported only to upgrade.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import CursorResult, Engine, Row, create_engine, event, inspect, text
from sqlalchemy.exc import SQLAlchemyError

from freshindex.core.errors import ConfigError, RetryableError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    """An engine for ``url``; SQLite gets WAL mode and a busy timeout so that
    a worker process and the CLI can share one registry file."""
    kwargs: dict = {"future": True}
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
    else:
        kwargs["pool_size"] = pool_size
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(url, **kwargs)
    except (SQLAlchemyError, ImportError, ValueError) as exc:
        raise ConfigError(f"cannot use registry URL: {exc}") from exc
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # pragma: no cover - exercised by every sqlite test
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    return engine


def _alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


_REVISION = re.compile(r"""^revision\s*=\s*["']([^"']+)["']""", re.M)
_DOWN = re.compile(r"""^down_revision\s*=\s*(?:["']([^"']+)["']|None)""", re.M)


@functools.cache
def head_revision() -> str:
    """The head of the migration chain, from the migration files' ``revision``/``down_revision`` lines.

    Falls back to Alembic's own reading when the files do not form one plain
    chain (a merge, a tuple of down revisions): then both agree by definition.
    """
    revisions: dict[str, str | None] = {}
    for path in sorted((MIGRATIONS / "versions").glob("*.py")):
        source = path.read_text()
        rev, down = _REVISION.search(source), _DOWN.search(source)
        if rev is None or down is None:
            return script_head_revision()
        revisions[rev.group(1)] = down.group(1)
    heads = set(revisions) - {d for d in revisions.values() if d}
    return heads.pop() if len(heads) == 1 else script_head_revision()


def script_head_revision() -> str:
    """Alembic's head of the migration scripts (imports Alembic)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if head is None:
        raise ConfigError(f"no migration scripts in {MIGRATIONS / 'versions'}")
    return head


def current_revision(engine: Engine) -> str | None:
    """The registry's schema revision (the ``alembic_version`` row), or None for an empty database."""
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            rows: Sequence[str] = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except SQLAlchemyError as exc:
        raise RetryableError(f"registry unreachable: {exc}") from exc
    if len(rows) > 1:  # several heads applied: let Alembic say which (it raises on an ambiguous one)
        from alembic.runtime.migration import MigrationContext

        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    return rows[0] if rows else None


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Upgrade the schema; returns (revision before, revision after)."""
    before = current_revision(engine)
    from alembic import command

    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return before, current_revision(engine) or ""


def affected_rows(result: object) -> int:
    """The rows an UPDATE or DELETE matched.

    ``Session.execute`` is typed to return a plain ``Result``; for such a
    statement it is a ``CursorResult``, the one that has ``rowcount``.
    """
    if not isinstance(result, CursorResult):
        raise TypeError(f"not the result of an UPDATE or DELETE: {type(result).__name__}")
    return int(result.rowcount)


def plain_rows(rows: Iterable[Row[*tuple[Any, ...]]]) -> Iterator[tuple[Any, ...]]:
    """The rows of a wide select as plain tuples, for the type checker only (nothing is copied).

    A select of more columns than SQLAlchemy's overloads type yields rows that
    mypy unpacks as ``object``; as ``tuple[Any, ...]`` they unpack as ``Any``.
    """
    return iter(rows)
