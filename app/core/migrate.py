"""Run Alembic migrations programmatically (the CLI and the tests use this, never create_all)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from functools import lru_cache

from app.core.resources import resource_path


@contextmanager
def _quiet_alembic():
    """alembic logs its plugins at INFO when first imported: a schema check under the worker's INFO logging must
    print nothing of its own."""
    quiet = logging.getLogger("alembic")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        yield
    finally:
        quiet.setLevel(level)


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config(str(resource_path("alembic.ini")))
    cfg.set_main_option("script_location", str(resource_path("migrations")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


@lru_cache(maxsize=1)
def _script():
    """The migration scripts, read quietly (see `_quiet_alembic`)."""
    with _quiet_alembic():
        from alembic.script import ScriptDirectory

        return ScriptDirectory.from_config(alembic_config("sqlite://"))


def head_revision() -> str:
    """The schema revision the code needs: the newest migration."""
    return _script().get_current_head()


def revision_problem(current: str | None, shown: str) -> str | None:
    """Why a database at schema revision `current` (None: no schema) cannot be used by this code, as one line naming
    what fixes it; None when it is at the head."""
    head = head_revision()
    if current == head:
        return None
    if current is None:
        return f"the database at {shown} has no schema yet: run `chargeback db upgrade`"
    if current not in {r.revision for r in _script().walk_revisions()}:
        return (f"the database at {shown} is at schema revision {current}, which this version does not know (a newer "
                f"version migrated it; this one needs {head}): run that version, or `chargeback db downgrade` with it")
    return (f"the database at {shown} is at schema revision {current}, this version needs {head}: "
            "run `chargeback db upgrade`")


def current_revision(connection) -> str | None:
    """The schema revision stored in the database (None: never migrated), read as alembic stores it."""
    from sqlalchemy import inspect, text

    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def schema_problem(url: str) -> str | None:
    """`revision_problem` for the database at `url`, or why it cannot be reached (the URL shown without password)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    shown = make_url(url).render_as_string(hide_password=True)
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            current = current_revision(connection)
    except SQLAlchemyError as exc:
        text = str(getattr(exc, "orig", None) or exc).strip()
        reason = text.splitlines()[0] if text else type(exc).__name__
        return f"cannot reach the database at {shown}: {reason} (check CHARGEBACK_DATABASE_URL)"
    finally:
        engine.dispose()
    return revision_problem(current, shown)
