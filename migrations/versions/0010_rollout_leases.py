"""rollout leases: several `harnessrl run` workers share one run's (round, task, index) slots

Revision ID: 0010
Revises: 0009

- ``rollout_leases``: one row per (run, round, task, slot); a worker claims open or expired rows
  (``FOR UPDATE SKIP LOCKED`` on PostgreSQL), renews them while their rollouts run, and marks them
  done with the rollout that ended the slot. Runs started before this revision get their rows on the
  first claim (slots whose rollouts already ended are marked done then).
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rollout_leases",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("run", sa.String(length=200), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("task", sa.String(length=400), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("rollout_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("run", "round", "task", "slot"),
    )
    op.create_index("ix_rollout_leases_claimable", "rollout_leases", ["run", "round", "status", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_rollout_leases_claimable", table_name="rollout_leases")
    op.drop_table("rollout_leases")
