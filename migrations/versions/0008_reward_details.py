"""how each reward component was reached (the judge's model, tokens, cost and reasons)

Revision ID: 0008
Revises: 0007

- ``rollouts.reward_details``: component name -> a JSON object (at most 16 KiB each), written with the
  final rewards by ``POST /api/rollouts/{id}/finish``; ``{}`` for rollouts ended before this revision.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reward_details", sa.JSON(), server_default="{}", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.drop_column("reward_details")
