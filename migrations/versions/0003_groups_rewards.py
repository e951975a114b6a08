"""groups know their size and when they became ready; rollouts keep reward components

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.add_column(sa.Column("size", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_groups_ready_at", ["ready_at"], unique=False)
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rewards", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.drop_column("rewards")
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.drop_index("ix_groups_ready_at")
        batch_op.drop_column("ready_at")
        batch_op.drop_column("size")
