"""live keys: an agent's everyday API key, each of its sessions a rollout

Revision ID: 0016
Revises: 0015

``live_keys``: a person's key (its sha256 only), the run its sessions go to, whether they may be
trained on, the idle time that closes a session, and the session open now (store.live_keys).
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "live_keys",
        sa.Column("id", ID, nullable=False),
        sa.Column("user_name", sa.String(length=200), nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("train", sa.Boolean(), nullable=False),
        sa.Column("idle_s", sa.Float(), nullable=False),
        sa.Column("session_rollout_id", ID, nullable=True),
        sa.Column("session_name", sa.String(length=200), nullable=True),
        sa.Column("last_call_at", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    with op.batch_alter_table("live_keys", schema=None) as batch_op:
        batch_op.create_index("ix_live_keys_user_name", ["user_name"], unique=False)
        batch_op.create_index("ix_live_keys_run_id", ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("live_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_live_keys_run_id")
        batch_op.drop_index("ix_live_keys_user_name")
    op.drop_table("live_keys")
