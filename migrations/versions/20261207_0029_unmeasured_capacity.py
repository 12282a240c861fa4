"""unmeasured_capacity: per rated period, each pool's gap hours and the capacity they left unmeasured (SPEC 5.8)

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07 06:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None

STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table('unmeasured_capacity',
    sa.Column('period_id', sa.Integer(), nullable=False),
    sa.Column('cluster', STR(), nullable=False),
    sa.Column('pool', STR(), nullable=False),
    sa.Column('gap_hours', sa.Integer(), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('gpu_hours', sa.Numeric(20, 6), nullable=False),
    sa.Column('amount', sa.Numeric(18, 2), nullable=False),
    sa.ForeignKeyConstraint(['period_id'], ['billing_period.id'], name=op.f('fk_unmeasured_capacity_period_id_billing_period'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('period_id', 'cluster', 'pool', name=op.f('pk_unmeasured_capacity'))
    )


def downgrade() -> None:
    op.drop_table('unmeasured_capacity')
