"""tenant usage keeps the occupied samples its efficiency is the mean over, so an invoice weights by samples

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 02:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tenant_usage', schema=None) as batch_op:
        batch_op.add_column(sa.Column('activity_samples', sa.BigInteger(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('tenant_usage', schema=None) as batch_op:
        batch_op.drop_column('activity_samples')
