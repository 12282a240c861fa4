"""payment_terms: the payment terms a period was finalized under (issue 30 item 4)

Its invoices are due `payment_terms_days` after their issue date (the finalization day). Periods
finalized before it keep NULL: no terms were recorded, so their invoices name no due date (none is
made up from today's setting).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-08 00:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0032'
down_revision = '0031'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('billing_period') as batch:
        batch.add_column(sa.Column('payment_terms_days', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('billing_period') as batch:
        batch.drop_column('payment_terms_days')
