"""per-unit hourly rollups: each GPU and MIG instance's GPU-seconds, holders, activity and FB_USED peak (issue 13)

Revision ID: 0010
Revises: 0009 (namespace_usage)
Create Date: 2026-12-01 05:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table('unit_hour',
    sa.Column('hour', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('node', STR(), nullable=False),
    sa.Column('gpu_uuid', STR(), nullable=False),
    sa.Column('gpu_instance', STR(), nullable=False),
    sa.Column('gpu_index', STR(), nullable=False),
    sa.Column('mig_profile', STR(), nullable=False),
    sa.Column('model', STR(), nullable=False),
    sa.Column('pool', STR(), nullable=False),
    sa.Column('capacity_gpu_seconds', sa.Numeric(precision=20, scale=6), nullable=False),
    sa.Column('gpu_seconds', sa.Numeric(precision=20, scale=6), nullable=False),
    sa.Column('activity_sum', sa.Float(), nullable=False),
    sa.Column('activity_samples', sa.Integer(), nullable=False),
    sa.Column('tenants', STR(), nullable=False),
    sa.Column('fb_used_peak_mib', sa.Float(), nullable=True),
    sa.Column('policy_version_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['policy_version_id'], ['policy_version.id'], name=op.f('fk_unit_hour_policy_version_id_policy_version')),
    sa.PrimaryKeyConstraint('hour', 'node', 'gpu_uuid', 'gpu_instance', name=op.f('pk_unit_hour'))
    )
    with op.batch_alter_table('unit_hour', schema=None) as batch_op:
        batch_op.create_index('ix_unit_hour_pool_hour', ['pool', 'hour'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('unit_hour', schema=None) as batch_op:
        batch_op.drop_index('ix_unit_hour_pool_hour')
    op.drop_table('unit_hour')
