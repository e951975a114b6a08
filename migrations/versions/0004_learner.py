"""learner checkpoints (with the groups they consume) and per-step metrics

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "learner_checkpoints",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("group_ids", sa.JSON(), nullable=False),
        sa.Column("last_ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_group_id", ID, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "step"),
    )
    with op.batch_alter_table("learner_checkpoints", schema=None) as batch_op:
        batch_op.create_index("ix_learner_checkpoints_run_id", ["run_id"], unique=False)
    op.create_table(
        "learner_steps",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "step"),
    )
    with op.batch_alter_table("learner_steps", schema=None) as batch_op:
        batch_op.create_index("ix_learner_steps_run_id", ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("learner_steps", schema=None) as batch_op:
        batch_op.drop_index("ix_learner_steps_run_id")
    op.drop_table("learner_steps")
    with op.batch_alter_table("learner_checkpoints", schema=None) as batch_op:
        batch_op.drop_index("ix_learner_checkpoints_run_id")
    op.drop_table("learner_checkpoints")
