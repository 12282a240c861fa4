"""namespace usage: each usage rollup row split by namespace, so unallocated use can be traced to its namespaces

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 05:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    # Hours ingested before this revision keep no namespace rows; readers show them as "(not recorded)".
    op.create_table('namespace_usage',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('hour', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('pool', STR(), nullable=False),
    sa.Column('namespace', STR(), nullable=False),
    sa.Column('tenant', STR(), nullable=False),
    sa.Column('klass', STR(), nullable=False),
    sa.Column('dark', sa.Boolean(), nullable=False),
    sa.Column('gpu_seconds', sa.Numeric(precision=20, scale=6), nullable=False),
    sa.Column('activity_sum', sa.Float(), nullable=False),
    sa.Column('activity_samples', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_namespace_usage')),
    sa.UniqueConstraint('hour', 'pool', 'namespace', 'tenant', 'klass', 'dark', name='uq_namespace_usage_key')
    )
    with op.batch_alter_table('namespace_usage', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_namespace_usage_hour'), ['hour'], unique=False)
        batch_op.create_index(batch_op.f('ix_namespace_usage_tenant'), ['tenant'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('namespace_usage', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_namespace_usage_tenant'))
        batch_op.drop_index(batch_op.f('ix_namespace_usage_hour'))
    op.drop_table('namespace_usage')
