"""reconcile_hour, reconcile_pool_hour: each hour checked against the source by a second query path (issue 24);
billing_period.accept_unreconciled_reason: why a month was closed with hours the check did not confirm

Revision ID: 0027
Revises: 0024
Create Date: 2026-12-03 00:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0027'
down_revision = '0024'
branch_labels = None
depends_on = None

STR = sqlmodel.sql.sqltypes.AutoString
WHEN = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    op.create_table(
        'reconcile_hour',
        sa.Column('cluster', STR(), nullable=False, server_default='default'),
        sa.Column('hour', WHEN(), nullable=False),
        sa.Column('verdict', STR(), nullable=False),
        sa.Column('stored_status', STR(), nullable=False),
        sa.Column('ingest_attempts', sa.Integer(), nullable=False),
        sa.Column('checked_at', WHEN(), nullable=False),
        sa.Column('detail', sa.Text(), nullable=False, server_default=''),
        sa.PrimaryKeyConstraint('cluster', 'hour', name=op.f('pk_reconcile_hour')),
    )
    op.create_table(
        'reconcile_pool_hour',
        sa.Column('cluster', STR(), nullable=False, server_default='default'),
        sa.Column('hour', WHEN(), nullable=False),
        sa.Column('pool', STR(), nullable=False),
        sa.Column('agrees', sa.Boolean(), nullable=False),
        sa.Column('stored_gpus', sa.Integer(), nullable=True),
        sa.Column('source_gpus', sa.Integer(), nullable=False),
        sa.Column('stored_gpu_seconds', sa.Numeric(20, 6), nullable=True),
        sa.Column('source_gpu_seconds', sa.Numeric(20, 6), nullable=False),
        sa.Column('stored_kwh', sa.Numeric(20, 9), nullable=True),
        sa.Column('source_kwh', sa.Numeric(20, 9), nullable=False),
        sa.Column('tenants', sa.Text(), nullable=False, server_default=''),
        sa.Column('note', STR(), nullable=False),
        sa.PrimaryKeyConstraint('cluster', 'hour', 'pool', name=op.f('pk_reconcile_pool_hour')),
    )
    with op.batch_alter_table('billing_period', schema=None) as batch_op:
        batch_op.add_column(sa.Column('accept_unreconciled_reason', STR(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('billing_period', schema=None) as batch_op:
        batch_op.drop_column('accept_unreconciled_reason')
    op.drop_table('reconcile_pool_hour')
    op.drop_table('reconcile_hour')
