"""pool_hour_rate, inference_hour_rate, sla_hour_rate: amounts as exact numerators over a stored denominator (issue 24)

Rating is exact per SPEC 5.7 (app/billing/rating.py): a pool-hour's C and rate are no longer quantised
(to 1e-20 and 1e-36) but stored as integers over `den`, and each stored amount with them. Rows stored
under the old quanta are deleted: the next rating (or the worker's hour_rates task) stores them again
from the rollups, which are unchanged.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-03 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0028'
down_revision = '0027'
branch_labels = None
depends_on = None

EXACT = sa.Numeric().with_variant(sa.Text(), 'sqlite')
STORED = ('pool_hour_rate', 'inference_hour_rate', 'sla_hour_rate')


def upgrade() -> None:
    for table in STORED:
        op.execute(f"DELETE FROM {table}")
    op.add_column('pool_hour_rate', sa.Column('den', EXACT, nullable=True))
    for table in STORED[1:]:
        op.add_column(table, sa.Column('den', EXACT, nullable=False, server_default='1'))


def downgrade() -> None:
    for table in STORED:
        op.execute(f"DELETE FROM {table}")  # the old quanta cannot be derived from these: stored again when rated
        op.drop_column(table, 'den')
