"""unpooled GPUs: their capacity and use per billing period, and the recorded reason for closing with them

Revision ID: 0007
Revises: 0004
Create Date: 2026-12-01 00:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    with op.batch_alter_table('billing_period', schema=None) as batch_op:
        batch_op.add_column(sa.Column('accept_unpooled_reason', STR(), nullable=True))
        batch_op.add_column(sa.Column('unpooled_hours', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('unpooled_gpus', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('unpooled_gpu_hours', sa.Numeric(20, 6), nullable=False, server_default='0'))

    op.create_table('unpooled_usage',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('period_id', sa.Integer(), nullable=False),
    sa.Column('tenant', STR(), nullable=False),
    sa.Column('klass', STR(), nullable=False),
    sa.Column('gpu_hours', sa.Numeric(20, 6), nullable=False),
    sa.ForeignKeyConstraint(['period_id'], ['billing_period.id'], name=op.f('fk_unpooled_usage_period_id_billing_period'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_unpooled_usage'))
    )
    with op.batch_alter_table('unpooled_usage', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_unpooled_usage_period_id'), ['period_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('unpooled_usage', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_unpooled_usage_period_id'))
    op.drop_table('unpooled_usage')
    with op.batch_alter_table('billing_period', schema=None) as batch_op:
        batch_op.drop_column('unpooled_gpu_hours')
        batch_op.drop_column('unpooled_gpus')
        batch_op.drop_column('unpooled_hours')
        batch_op.drop_column('accept_unpooled_reason')
