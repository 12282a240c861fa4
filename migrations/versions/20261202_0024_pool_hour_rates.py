"""pool_hour_rate, inference_hour_rate, sla_hour_rate: each pool-hour's rate and per-hour amounts, stored once (issue 15)

The month's rating sums these instead of pricing every pool-hour again (app/billing/rating_sql.py).
Triggers delete a pool-hour's stored rows whenever one of its rollup rows (pool_hour, pool_hour_model,
usage_rollup, breach_minute, breach_share) is inserted, updated or deleted, whoever writes them, so a stored rate is never older
than its inputs; the next rating (or the worker's hour_rates task) stores it again. PostgreSQL: one
statement-level trigger per table and event over its transition table; SQLite: row triggers.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02 04:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None

EXACT = sa.Numeric().with_variant(sa.Text(), 'sqlite')
INPUTS = ('pool_hour', 'pool_hour_model', 'usage_rollup', 'breach_minute')
STORED = ('pool_hour_rate', 'inference_hour_rate', 'sla_hour_rate')
SHARES = 'breach_share'  # keyed by breach_id: its pool-hour is its breach minute's
EVENTS = (('INSERT', 'NEW'), ('DELETE', 'OLD'), ('UPDATE', 'OLD'), ('UPDATE', 'NEW'))


def upgrade() -> None:
    op.create_table(
        'pool_hour_rate',
        sa.Column('hour', sa.DateTime(timezone=True), nullable=False),
        sa.Column('cluster', sa.String(), nullable=False),
        sa.Column('pool', sa.String(), nullable=False),
        sa.Column('kind', sa.String(), nullable=False),
        sa.Column('policy_version_id', sa.Integer(), nullable=False),
        sa.Column('gpus', sa.Integer(), nullable=False),
        sa.Column('capacity_gpu_seconds', sa.Numeric(20, 6), nullable=False),
        *(sa.Column(name, EXACT, nullable=True) for name in
          ('cost', 'rate', 'dark_rate', 'idle', 'idle_amount', 'dark', 'dark_amount', 'unused', 'unused_amount')),
        sa.ForeignKeyConstraint(['policy_version_id'], ['policy_version.id'],
                                name=op.f('fk_pool_hour_rate_policy_version_id_policy_version')),
        sa.PrimaryKeyConstraint('hour', 'cluster', 'pool', name=op.f('pk_pool_hour_rate')),
    )
    op.create_table(
        'inference_hour_rate',
        sa.Column('hour', sa.DateTime(timezone=True), nullable=False),
        sa.Column('cluster', sa.String(), nullable=False),
        sa.Column('pool', sa.String(), nullable=False),
        sa.Column('tenant', sa.String(), nullable=False),
        sa.Column('policy_version_id', sa.Integer(), nullable=False),
        sa.Column('over', EXACT, nullable=False),
        sa.Column('amount', EXACT, nullable=False),
        sa.PrimaryKeyConstraint('hour', 'cluster', 'pool', 'tenant', name=op.f('pk_inference_hour_rate')),
    )
    op.create_table(
        'sla_hour_rate',
        sa.Column('hour', sa.DateTime(timezone=True), nullable=False),
        sa.Column('cluster', sa.String(), nullable=False),
        sa.Column('pool', sa.String(), nullable=False),
        sa.Column('kind', sa.String(), nullable=False),
        sa.Column('service', sa.String(), nullable=False),
        sa.Column('account', sa.String(), nullable=False),
        sa.Column('klass', sa.String(), nullable=False),
        sa.Column('minute_end', sa.BigInteger(), nullable=False),
        sa.Column('policy_version_id', sa.Integer(), nullable=False),
        sa.Column('quantity', EXACT, nullable=False),
        sa.Column('amount', EXACT, nullable=False),
        sa.PrimaryKeyConstraint('hour', 'cluster', 'pool', 'kind', 'service', 'account', 'klass', 'minute_end',
                                name=op.f('pk_sla_hour_rate')),
    )
    if op.get_bind().dialect.name == 'postgresql':
        for name, keys in (('pool_hour_rate_stale', "SELECT DISTINCT hour, cluster, pool FROM changed"),
                           ('pool_hour_rate_stale_shares', "SELECT DISTINCT m.hour, m.cluster, m.pool FROM changed"
                                                           " JOIN breach_minute m ON m.id = changed.breach_id")):
            op.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                + " ".join(f"DELETE FROM {t} s USING ({keys}) c"
                           f" WHERE s.hour = c.hour AND s.cluster = c.cluster AND s.pool = c.pool;" for t in STORED)
                + " RETURN NULL; END $$"
            )
        for table in (*INPUTS, SHARES):
            function = 'pool_hour_rate_stale_shares' if table == SHARES else 'pool_hour_rate_stale'
            for event, transition in EVENTS:
                op.execute(f"CREATE TRIGGER {table}_rate_stale_{event.lower()}_{transition.lower()} AFTER {event} ON {table}"
                           f" REFERENCING {transition} TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {function}()")
        return
    for table in (*INPUTS, SHARES):
        for event, row in EVENTS:
            if table == SHARES:
                where = f"(hour, cluster, pool) IN (SELECT hour, cluster, pool FROM breach_minute WHERE id = {row}.breach_id)"
            else:
                where = f"hour = {row}.hour AND cluster = {row}.cluster AND pool = {row}.pool"
            deletes = " ".join(f"DELETE FROM {t} WHERE {where};" for t in STORED)
            op.execute(f"CREATE TRIGGER {table}_rate_stale_{event.lower()}_{row.lower()} AFTER {event} ON {table}"
                       f" FOR EACH ROW BEGIN {deletes} END")


def downgrade() -> None:
    pg = op.get_bind().dialect.name == 'postgresql'
    for table in (*INPUTS, SHARES):
        for event, row in EVENTS:
            name = f"{table}_rate_stale_{event.lower()}_{row.lower()}"
            op.execute(f"DROP TRIGGER {name} ON {table}" if pg else f"DROP TRIGGER {name}")
    if pg:
        op.execute("DROP FUNCTION pool_hour_rate_stale()")
        op.execute("DROP FUNCTION pool_hour_rate_stale_shares()")
    for table in reversed(STORED):
        op.drop_table(table)
