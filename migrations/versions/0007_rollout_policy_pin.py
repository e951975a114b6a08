"""rollouts pinned to a policy version by the control plane (evaluation)

Revision ID: 0007
Revises: 0006

- ``rollouts.pinned_version``: the version ``POST /api/rollouts {"policy": ...}`` pinned the rollout to
  (0 = the base model); null for rollouts served by the current version when they started.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pinned_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.drop_column("pinned_version")
