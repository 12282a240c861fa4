"""data_generation: the counter caches of derived answers key on, shared by every process (app/core/generation.py)

Revision ID: 0018
Revises: 0014 (revisions are chained in the order their branches merged)
Create Date: 2026-12-01 11:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table('data_generation',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('value', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_data_generation')),
    )
    op.bulk_insert(table, [{'id': 1, 'value': 0}])


def downgrade() -> None:
    op.drop_table('data_generation')
