"""document_manifest: the sealed manifest of a finalized period's issued documents (issue 25 item 7)

Periods issued before it keep no manifest (none is made up from bytes that may have changed since):
they are checked as before, each stored document against its own hash.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07 12:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0031'
down_revision = '0030'
branch_labels = None
depends_on = None

STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    with op.batch_alter_table('billing_period') as batch:
        batch.add_column(sa.Column('manifest', sa.Text(), nullable=True))
        batch.add_column(sa.Column('manifest_sha256', STR(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('billing_period') as batch:
        batch.drop_column('manifest_sha256')
        batch.drop_column('manifest')
