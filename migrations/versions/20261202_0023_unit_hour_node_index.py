"""unit_hour: an index on (pool, node, hour) for the paged pool heatmap (app/metrics/unit_read.py)

A page of 32 nodes and the walk over a pool's node names read only those nodes' rows instead of every
unit-hour of the pool over the range.

Revision ID: 0023
Revises: 0020 (revisions are chained in the order their branches merged)
Create Date: 2026-12-02 02:00:00
"""

from alembic import op

revision = '0023'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_unit_hour_pool_node_hour', 'unit_hour', ['pool', 'node', 'hour'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_unit_hour_pool_node_hour', table_name='unit_hour')
