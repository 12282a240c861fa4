"""Run Alembic migrations programmatically (the CLI and the tests use this, never create_all)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from app.core.resources import resource_path


def alembic_config(url: str) -> Config:
    cfg = Config(str(resource_path("alembic.ini")))
    cfg.set_main_option("script_location", str(resource_path("migrations")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)
