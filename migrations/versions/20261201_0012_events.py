"""event: the outbox that webhooks, e-mail and budget alerts deliver from (app/core/events.py)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 11:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('event',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('type', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('tenant', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('key', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_event')),
    sa.UniqueConstraint('key', name=op.f('uq_event_key')),
    )
    op.create_index(op.f('ix_event_type'), 'event', ['type'], unique=False)
    op.create_index(op.f('ix_event_created_at'), 'event', ['created_at'], unique=False)
    op.create_index(op.f('ix_event_tenant'), 'event', ['tenant'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_event_tenant'), table_name='event')
    op.drop_index(op.f('ix_event_created_at'), table_name='event')
    op.drop_index(op.f('ix_event_type'), table_name='event')
    op.drop_table('event')
