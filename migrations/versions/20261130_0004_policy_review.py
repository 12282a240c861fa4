"""policy review: change requests, comments, approvals, releases, artifacts; audit_log append-only on PostgreSQL

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 09:00:00
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

# The audit log is append-only: the database itself refuses to change or remove an entry.
AUDIT_GUARD_FUNCTION = """
CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql
"""
AUDIT_GUARD_TRIGGER = """
CREATE TRIGGER audit_log_append_only
BEFORE UPDATE OR DELETE ON audit_log
FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()
"""
# TRUNCATE skips row triggers; a statement trigger closes that door too.
AUDIT_GUARD_TRUNCATE = """
CREATE TRIGGER audit_log_no_truncate
BEFORE TRUNCATE ON audit_log
FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()
"""

UTC = sqlmodel.sql.sqltypes.UTCDateTime
STR = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table('change_request',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('title', STR(), nullable=False),
    sa.Column('justification', sa.Text(), nullable=False),
    sa.Column('author', STR(), nullable=False),
    sa.Column('state', STR(), nullable=False),
    sa.Column('base_version_id', sa.Integer(), nullable=False),
    sa.Column('document', sa.Text(), nullable=False),
    sa.Column('approval_count', sa.Integer(), nullable=False),
    sa.Column('created_at', UTC(), nullable=False),
    sa.Column('updated_at', UTC(), nullable=False),
    sa.Column('submitted_at', UTC(), nullable=True),
    sa.Column('decided_at', UTC(), nullable=True),
    sa.Column('applied_version_id', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['base_version_id'], ['policy_version.id'], name=op.f('fk_change_request_base_version_id_policy_version')),
    sa.ForeignKeyConstraint(['applied_version_id'], ['policy_version.id'], name=op.f('fk_change_request_applied_version_id_policy_version')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_change_request'))
    )
    with op.batch_alter_table('change_request', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_change_request_author'), ['author'], unique=False)
        batch_op.create_index(batch_op.f('ix_change_request_state'), ['state'], unique=False)

    op.create_table('change_comment',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('change_id', sa.Integer(), nullable=False),
    sa.Column('author', STR(), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('created_at', UTC(), nullable=False),
    sa.ForeignKeyConstraint(['change_id'], ['change_request.id'], name=op.f('fk_change_comment_change_id_change_request'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_change_comment'))
    )
    with op.batch_alter_table('change_comment', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_change_comment_change_id'), ['change_id'], unique=False)

    op.create_table('change_approval',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('change_id', sa.Integer(), nullable=False),
    sa.Column('reviewer', STR(), nullable=False),
    sa.Column('decision', STR(), nullable=False),
    sa.Column('comment', sa.Text(), nullable=False),
    sa.Column('created_at', UTC(), nullable=False),
    sa.ForeignKeyConstraint(['change_id'], ['change_request.id'], name=op.f('fk_change_approval_change_id_change_request'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_change_approval')),
    sa.UniqueConstraint('change_id', 'reviewer', name='uq_change_approval_reviewer')
    )
    with op.batch_alter_table('change_approval', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_change_approval_change_id'), ['change_id'], unique=False)

    op.create_table('release',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', STR(), nullable=False),
    sa.Column('service', STR(), nullable=False),
    sa.Column('planned_at', UTC(), nullable=False),
    sa.Column('state', STR(), nullable=False),
    sa.Column('created_by', STR(), nullable=False),
    sa.Column('created_at', UTC(), nullable=False),
    sa.Column('effective_from', UTC(), nullable=True),
    sa.Column('applied_by', STR(), nullable=True),
    sa.Column('applied_at', UTC(), nullable=True),
    sa.Column('previous_version_id', sa.Integer(), nullable=True),
    sa.Column('applied_version_id', sa.Integer(), nullable=True),
    sa.Column('deployed_by', STR(), nullable=True),
    sa.Column('deployed_at', UTC(), nullable=True),
    sa.Column('rollback_version_id', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['previous_version_id'], ['policy_version.id'], name=op.f('fk_release_previous_version_id_policy_version')),
    sa.ForeignKeyConstraint(['applied_version_id'], ['policy_version.id'], name=op.f('fk_release_applied_version_id_policy_version')),
    sa.ForeignKeyConstraint(['rollback_version_id'], ['policy_version.id'], name=op.f('fk_release_rollback_version_id_policy_version')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_release'))
    )
    with op.batch_alter_table('release', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_release_state'), ['state'], unique=False)

    op.create_table('release_change',
    sa.Column('release_id', sa.Integer(), nullable=False),
    sa.Column('change_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['release_id'], ['release.id'], name=op.f('fk_release_change_release_id_release'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['change_id'], ['change_request.id'], name=op.f('fk_release_change_change_id_change_request')),
    sa.PrimaryKeyConstraint('release_id', 'change_id', name=op.f('pk_release_change')),
    sa.UniqueConstraint('change_id', name='uq_release_change_change_id')
    )

    op.create_table('policy_artifact',
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('created_at', UTC(), nullable=False),
    sa.Column('files', sa.Text(), nullable=False),
    sa.Column('bundle', sa.LargeBinary(), nullable=False),
    sa.Column('sha256', STR(), nullable=False),
    sa.ForeignKeyConstraint(['version_id'], ['policy_version.id'], name=op.f('fk_policy_artifact_version_id_policy_version')),
    sa.PrimaryKeyConstraint('version_id', name=op.f('pk_policy_artifact'))
    )

    if op.get_bind().dialect.name == 'postgresql':
        op.execute(AUDIT_GUARD_FUNCTION)
        op.execute(AUDIT_GUARD_TRIGGER)
        op.execute(AUDIT_GUARD_TRUNCATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log')
        op.execute('DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log')
        op.execute('DROP FUNCTION IF EXISTS audit_log_append_only()')

    op.drop_table('policy_artifact')
    op.drop_table('release_change')
    with op.batch_alter_table('release', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_release_state'))
    op.drop_table('release')
    with op.batch_alter_table('change_approval', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_change_approval_change_id'))
    op.drop_table('change_approval')
    with op.batch_alter_table('change_comment', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_change_comment_change_id'))
    op.drop_table('change_comment')
    with op.batch_alter_table('change_request', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_change_request_state'))
        batch_op.drop_index(batch_op.f('ix_change_request_author'))
    op.drop_table('change_request')
