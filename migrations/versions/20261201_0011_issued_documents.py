"""issued_document: the bytes of every document a finalized period issued (CSV, FOCUS, PDF, invoice and report PDFs)

A finalized period is served from these rows byte for byte, whatever the renderers later become.

Periods finalized before this revision kept only the SHA-256 of their CSV, FOCUS and PDF exports
(billing_period.csv_sha256/focus_sha256/pdf_sha256); the issued bytes are gone and this migration
cannot recreate them (a render today uses today's renderer). Such periods get no rows here: their
downloads are live re-renders, marked as such (header X-Document: re-rendered, X-Issued-SHA256 with
the stored hash, and a notice when the re-render's hash differs), and `chargeback verify` says so.

Down revision: 0010 (unit_hour), the newest revision on main when this branch merged main in.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 06:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('issued_document',
    sa.Column('period_id', sa.Integer(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('tenant', sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column('content', sa.LargeBinary(), nullable=False),
    sa.Column('sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['period_id'], ['billing_period.id'], name=op.f('fk_issued_document_period_id_billing_period'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('period_id', 'kind', 'tenant', name=op.f('pk_issued_document'))
    )


def downgrade() -> None:
    op.drop_table('issued_document')
