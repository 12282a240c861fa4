"""budget: monthly budgets per tenant and department with alert thresholds (app/billing/budgets.py)

Revision ID: 0020
Revises: 0021 (revisions are chained in the order their branches merged)
Create Date: 2026-12-01 13:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0020'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('budget',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('scope', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('amount', sa.Numeric(precision=18, scale=2), nullable=False),
    sa.Column('currency', sqlmodel.sql.sqltypes.AutoString(length=3), nullable=False),
    sa.Column('thresholds', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('updated_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('updated_by', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_budget')),
    sa.UniqueConstraint('scope', 'name', name='uq_budget_scope_name'),
    )


def downgrade() -> None:
    op.drop_table('budget')
