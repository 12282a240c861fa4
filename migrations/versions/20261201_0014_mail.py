"""tenant_contact, mail_planned, mail_send: e-mailed statements and budget alerts (app/notify/mail_*.py)

Revisions are chained in the order their branches merged: 0014 follows 0015 (OIDC identities).

Revision ID: 0014
Revises: 0015
Create Date: 2026-12-01 12:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0014'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('tenant_contact',
    sa.Column('tenant', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('email', sqlmodel.sql.sqltypes.AutoString(length=254), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('tenant', 'email', name=op.f('pk_tenant_contact')),
    )
    op.create_table('mail_planned',
    sa.Column('event_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('planned_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['event_id'], ['event.id'], name=op.f('fk_mail_planned_event_id_event'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('event_id', name=op.f('pk_mail_planned')),
    )
    op.create_table('mail_send',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('event_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('audience', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('period', sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column('message_id', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('recipients', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('first_attempt_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('next_attempt_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('claimed_until', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('sent_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['event_id'], ['event.id'], name=op.f('fk_mail_send_event_id_event'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_mail_send')),
    sa.UniqueConstraint('event_id', 'kind', 'audience', name='uq_mail_send_event_kind_audience'),
    )
    op.create_index(op.f('ix_mail_send_event_id'), 'mail_send', ['event_id'], unique=False)
    op.create_index(op.f('ix_mail_send_status'), 'mail_send', ['status'], unique=False)
    op.create_index(op.f('ix_mail_send_next_attempt_at'), 'mail_send', ['next_attempt_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_mail_send_next_attempt_at'), table_name='mail_send')
    op.drop_index(op.f('ix_mail_send_status'), table_name='mail_send')
    op.drop_index(op.f('ix_mail_send_event_id'), table_name='mail_send')
    op.drop_table('mail_send')
    op.drop_table('mail_planned')
    op.drop_table('tenant_contact')
