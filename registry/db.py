"""Engine creation and schema migrations."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from freshindex.core.errors import ConfigError, RetryableError
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import SQLAlchemyError

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
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except SQLAlchemyError as exc:
        raise RetryableError(f"registry unreachable: {exc}") from exc


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Upgrade the schema; returns (revision before, revision after)."""
    before = current_revision(engine)
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return before, current_revision(engine) or ""
