"""which engine served each call, how long it queued for it, and failovers

Revision ID: 0009
Revises: 0008

- ``calls.engine``: the engine that served the call (its base URL); null for calls before this revision.
- ``calls.queue_ms``: milliseconds the call waited for a free in-flight slot on that engine (back-pressure).
- ``calls.moved_from``: set on the first call of a rollout served by another engine after its engine
  failed (the call re-prefilled there): the failed engine's base URL; null otherwise.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("engine", sa.String(length=400), nullable=True))
        batch_op.add_column(sa.Column("queue_ms", sa.Float(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("moved_from", sa.String(length=400), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_column("moved_from")
        batch_op.drop_column("queue_ms")
        batch_op.drop_column("engine")
