"""data quality: what ingestion cut rather than billed (a GPU unit reported above its capacity)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 00:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('data_quality_finding',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('hour', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('pool', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('unit', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('gpu_seconds_cut', sa.Numeric(precision=20, scale=6), nullable=False),
    sa.Column('detail', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_data_quality_finding'))
    )
    op.create_index(op.f('ix_data_quality_finding_hour'), 'data_quality_finding', ['hour'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_data_quality_finding_hour'), table_name='data_quality_finding')
    op.drop_table('data_quality_finding')
