"""quarantined groups say why; idempotent rollout creation; the sampling each call was made with

Revision ID: 0006
Revises: 0005

- ``groups.error``: why the learner quarantined a group (status ``quarantined``).
- ``rollouts.request_id`` / ``request_digest``: the client's id for the POST that created the rollout
  and a digest of its body, unique per run, so a retried POST finds the rollout instead of adding one.
- ``calls.temperature`` / ``calls.top_p``: the sampling the engine applied (a training run's fixed
  settings); null for calls recorded before this revision and where a client left them to the engine.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=True))
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("request_id", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("request_digest", sa.String(length=64), nullable=True))
        # A unique index, not a constraint: SQLite adds it without rebuilding the table.
        batch_op.create_index("ix_rollouts_run_request", ["run_id", "request_id"], unique=True)
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("temperature", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("top_p", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_column("top_p")
        batch_op.drop_column("temperature")
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.drop_index("ix_rollouts_run_request")
        batch_op.drop_column("request_digest")
        batch_op.drop_column("request_id")
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.drop_column("error")
