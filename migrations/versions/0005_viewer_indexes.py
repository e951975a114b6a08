"""indexes for the viewer's filters and run summaries

Revision ID: 0005
Revises: 0004

``ix_calls_rollout_stats`` covers every column the run summary aggregates and the rollout filter
``policy_version`` probes, so neither reads the calls' rows. That matters most on SQLite, where a
row's token blobs spill onto overflow pages that must be walked to reach any column stored after
them; there the index also carries ``tags`` (side calls). PostgreSQL keeps large values out of line
(TOAST), so its rows stay cheap to read, and a ``json`` column has no btree operator class anyway.
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

STATS = [
    "rollout_id",
    "policy_version",
    "parent_id",
    "fork_of",
    "drift_tokens",
    "num_prompt_tokens",
    "num_output_tokens",
]


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.create_index("ix_calls_rollout_stats", STATS + (["tags"] if sqlite else []), unique=False)
        batch_op.create_index("ix_calls_finish_reason", ["finish_reason"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_index("ix_calls_finish_reason")
        batch_op.drop_index("ix_calls_rollout_stats")
