"""sla_unresolved_hour: minutes per service-hour whose P99 bucket straddles the red line (never billed, shown)

Revision ID: 0006
Revises: 0004
Create Date: 2026-12-01 00:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('sla_unresolved_hour',
    sa.Column('hour', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('service', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('service_tenant', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('pool', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('minutes', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('hour', 'service', name=op.f('pk_sla_unresolved_hour'))
    )


def downgrade() -> None:
    op.drop_table('sla_unresolved_hour')
