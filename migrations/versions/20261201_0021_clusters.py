"""clusters: every ingest status and rollup row belongs to a cluster; existing rows are the default cluster's (issue 15)

Revision ID: 0021
Revises: 0019 (revisions are chained in the order their branches merged)
Create Date: 2026-12-01 12:00:00

Ingest status is kept per (cluster, hour), and each cluster has an `unpooled` pool of its own, so
the keys that held (hour, pool) or (hour, node, ...) now hold the cluster too. breach_minute only
gains the column (its key, service and minute, already names one cluster): rebuilding it on SQLite
would cascade-delete its breach_share rows.
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0021'
down_revision = '0019'
branch_labels = None
depends_on = None

DEFAULT = 'default'
# table -> (primary key before, after) for the tables keyed by their columns
KEYED = {
    'ingest_hour': (['hour'], ['cluster', 'hour']),
    'pool_hour': (['hour', 'pool'], ['hour', 'cluster', 'pool']),
    'pool_hour_model': (['hour', 'pool', 'model'], ['hour', 'cluster', 'pool', 'model']),
    'sla_unresolved_hour': (['hour', 'service'], ['hour', 'cluster', 'service']),
    'unit_hour': (['hour', 'node', 'gpu_uuid', 'gpu_instance'], ['hour', 'cluster', 'node', 'gpu_uuid', 'gpu_instance']),
}
# table -> (unique key before, after)
UNIQUE = {
    'usage_rollup': ('uq_usage_rollup_key', ['hour', 'pool', 'tenant', 'klass', 'dark'],
                     ['hour', 'cluster', 'pool', 'tenant', 'klass', 'dark']),
    'namespace_usage': ('uq_namespace_usage_key', ['hour', 'pool', 'namespace', 'tenant', 'klass', 'dark'],
                        ['hour', 'cluster', 'pool', 'namespace', 'tenant', 'klass', 'dark']),
}
PLAIN = ('breach_minute', 'data_quality_finding')
TABLES = (*KEYED, *UNIQUE, *PLAIN)


def _column() -> sa.Column:
    return sa.Column('cluster', sqlmodel.sql.sqltypes.AutoString(), nullable=False, server_default=DEFAULT)


def upgrade() -> None:
    for table, (_, after) in KEYED.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(_column())
            batch_op.drop_constraint(f'pk_{table}', type_='primary')
            batch_op.create_primary_key(f'pk_{table}', after)
    with op.batch_alter_table('ingest_hour', schema=None) as batch_op:
        batch_op.create_index('ix_ingest_hour_hour', ['hour'], unique=False)
    for table, (name, _, after) in UNIQUE.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(_column())
            batch_op.drop_constraint(name, type_='unique')
            batch_op.create_unique_constraint(name, after)
    for table in PLAIN:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(_column())


def downgrade() -> None:
    # The older schema has one source: other clusters' hours would collide with the default's
    # (each cluster's `unpooled`, node names), so they must be removed on purpose, not here.
    conn = op.get_bind()
    for table in TABLES:
        found = conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE cluster <> :d"), {"d": DEFAULT}).scalar()
        if found:
            raise RuntimeError(
                f"cannot downgrade below 0021: {table} holds {found} rows of clusters other than '{DEFAULT}'. "
                f"Delete them first (DELETE FROM <table> WHERE cluster <> '{DEFAULT}' for each of "
                f"{', '.join(TABLES)}; breach_share rows go with their breach_minute rows)")
    for table in PLAIN:
        # Native DROP COLUMN (SQLite >= 3.35 too): a batch rebuild of breach_minute would cascade to breach_share.
        op.execute(f"ALTER TABLE {table} DROP COLUMN cluster")
    for table, (name, before, _) in UNIQUE.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(name, type_='unique')
            batch_op.create_unique_constraint(name, before)
            batch_op.drop_column('cluster')
    with op.batch_alter_table('ingest_hour', schema=None) as batch_op:
        batch_op.drop_index('ix_ingest_hour_hour')
    for table, (before, _) in KEYED.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(f'pk_{table}', type_='primary')
            batch_op.create_primary_key(f'pk_{table}', before)
            batch_op.drop_column('cluster')
