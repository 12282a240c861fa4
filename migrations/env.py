"""Alembic environment: the URL comes from the caller (app.core.migrate) or from Settings."""

from alembic import context
from sqlmodel import SQLModel

# Every table module, so that SQLModel.metadata is complete; here, above the domains, so core imports none.
import app.auth.models
import app.billing.budget_models
import app.billing.models
import app.core.audit
import app.core.events
import app.core.generation
import app.http.idempotency
import app.metrics.models
import app.metrics.reconcile.models
import app.notify.mail_models
import app.notify.webhook_models
import app.policy.models
import app.review.models  # noqa: F401
from app.core.db import make_engine
from app.core.settings import get_settings

config = context.config
target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or get_settings().database_url
    engine = make_engine(url)
    with engine.connect() as conn:
        _run(conn)
        conn.commit()
    engine.dispose()


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
