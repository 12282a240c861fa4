"""webhook_subscription, webhook_planned, webhook_delivery, webhook_attempt: signed webhooks (app/notify/webhook_*.py)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01 18:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('webhook_subscription',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('url', sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
    sa.Column('description', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('event_types', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('secret', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('previous_secret', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('previous_secret_until', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('active', sa.Boolean(), nullable=False),
    sa.Column('disabled_reason', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('created_by', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('updated_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_subscription')),
    )
    op.create_table('webhook_planned',
    sa.Column('event_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('planned_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['event_id'], ['event.id'], name=op.f('fk_webhook_planned_event_id_event'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('event_id', name=op.f('pk_webhook_planned')),
    )
    op.create_table('webhook_delivery',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('event_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('subscription_id', sa.Integer(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('round_attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('first_attempt_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('next_attempt_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('claimed_until', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('delivered_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('last_status_code', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['event_id'], ['event.id'], name=op.f('fk_webhook_delivery_event_id_event'),
                            ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['subscription_id'], ['webhook_subscription.id'],
                            name=op.f('fk_webhook_delivery_subscription_id_webhook_subscription'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_delivery')),
    sa.UniqueConstraint('event_id', 'subscription_id', name='uq_webhook_delivery_event_subscription'),
    )
    op.create_index(op.f('ix_webhook_delivery_event_id'), 'webhook_delivery', ['event_id'], unique=False)
    op.create_index(op.f('ix_webhook_delivery_subscription_id'), 'webhook_delivery', ['subscription_id'], unique=False)
    op.create_index(op.f('ix_webhook_delivery_status'), 'webhook_delivery', ['status'], unique=False)
    op.create_index(op.f('ix_webhook_delivery_next_attempt_at'), 'webhook_delivery', ['next_attempt_at'], unique=False)
    op.create_table('webhook_attempt',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('delivery_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('started_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('duration_ms', sa.Integer(), nullable=True),
    sa.Column('status_code', sa.Integer(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('response', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['delivery_id'], ['webhook_delivery.id'],
                            name=op.f('fk_webhook_attempt_delivery_id_webhook_delivery'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_attempt')),
    )
    op.create_index(op.f('ix_webhook_attempt_delivery_id'), 'webhook_attempt', ['delivery_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_webhook_attempt_delivery_id'), table_name='webhook_attempt')
    op.drop_table('webhook_attempt')
    op.drop_index(op.f('ix_webhook_delivery_next_attempt_at'), table_name='webhook_delivery')
    op.drop_index(op.f('ix_webhook_delivery_status'), table_name='webhook_delivery')
    op.drop_index(op.f('ix_webhook_delivery_subscription_id'), table_name='webhook_delivery')
    op.drop_index(op.f('ix_webhook_delivery_event_id'), table_name='webhook_delivery')
    op.drop_table('webhook_delivery')
    op.drop_table('webhook_planned')
    op.drop_table('webhook_subscription')
