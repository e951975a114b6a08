"""per-token train/inference mismatch of each trained call

Revision ID: 0015
Revises: 0014

``call_mismatch``: for every call the learner trained, the learner's minus the sampler's log-prob of
each sampled token (float16, NaN where not compared) and its summary (learner.mismatch).
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "call_mismatch",
        sa.Column("id", ID, nullable=False),
        sa.Column("call_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("mean_abs", sa.Float(), nullable=True),
        sa.Column("max_abs", sa.Float(), nullable=True),
        sa.Column("k3", sa.Float(), nullable=True),
        sa.Column("frac_over", sa.Float(), nullable=True),
        sa.Column("deltas", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["call_id"], ["calls.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("call_id"),
    )
    with op.batch_alter_table("call_mismatch", schema=None) as batch_op:
        batch_op.create_index("ix_call_mismatch_run_id", ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("call_mismatch", schema=None) as batch_op:
        batch_op.drop_index("ix_call_mismatch_run_id")
    op.drop_table("call_mismatch")
