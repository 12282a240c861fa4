"""oidc_flow: the server-side record of each single sign-on in progress, consumed once by its callback

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07 12:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0030'
down_revision = '0029'
branch_labels = None
depends_on = None

STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table('oidc_flow',
    sa.Column('state_sha256', STR(), nullable=False),
    sa.Column('nonce_sha256', STR(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('expires_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('state_sha256', name=op.f('pk_oidc_flow'))
    )
    op.create_index(op.f('ix_oidc_flow_expires_at'), 'oidc_flow', ['expires_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_oidc_flow_expires_at'), table_name='oidc_flow')
    op.drop_table('oidc_flow')
