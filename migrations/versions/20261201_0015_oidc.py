"""oidc_identity: users who sign in through OpenID Connect, by (issuer, subject) (issue 14)

The first of issue 14's revisions to merge: it follows 0012 (the event outbox).

Revision ID: 0015
Revises: 0012
Create Date: 2026-12-01 12:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0015'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('oidc_identity',
    sa.Column('issuer', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('subject', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('groups', sa.Text(), nullable=False),
    sa.Column('suspended', sa.Boolean(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('last_login_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['app_user.id'], name=op.f('fk_oidc_identity_user_id_app_user'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('issuer', 'subject', name=op.f('pk_oidc_identity')),
    sa.UniqueConstraint('user_id', name=op.f('uq_oidc_identity_user_id')),
    )


def downgrade() -> None:
    op.drop_table('oidc_identity')
