"""call graph: forks and drift per call

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fork_of", Id, nullable=True))
        batch_op.add_column(sa.Column("drift_tokens", sa.Integer(), nullable=False, server_default="0"))
        batch_op.create_foreign_key("fk_calls_fork_of_calls", "calls", ["fork_of"], ["id"])
        batch_op.create_index("ix_calls_parent_id", ["parent_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_index("ix_calls_parent_id")
        batch_op.drop_constraint("fk_calls_fork_of_calls", type_="foreignkey")
        batch_op.drop_column("drift_tokens")
        batch_op.drop_column("fork_of")
