"""what a rollout's agent and engine time came to, kept after it ends

Revision ID: 0012
Revises: 0011

- ``rollouts.engine_s``: seconds its model calls spent in the engine, as the gateway measured them; kept
  when the rollout ends (the gateway's clock forgets it then; it read 0.0 afterwards). Null before.
- ``rollouts.agent_exit_code``: the agent's exit status (null: the runner did not say, or no agent ran).
- ``rollouts.agent_log``: the tail of the agent's own output (at most 16 KiB), for a failure to explain.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("engine_s", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("agent_exit_code", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("agent_log", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.drop_column("agent_log")
        batch_op.drop_column("agent_exit_code")
        batch_op.drop_column("engine_s")
