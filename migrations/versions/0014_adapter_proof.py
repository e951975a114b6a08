"""adapter digests and probes: which weights served each call, and proof the engine applied them

Revision ID: 0014
Revises: 0013

- ``adapters.digest``: sha256 of the adapter's config and weights (contracts.adapter_proof).
- ``adapters.probe``: the learner's log-probs of a probe sequence under the adapter and without it.
- ``adapters.proof``: what each engine answered to that probe at publication.
- ``calls.adapter_digest``: the digest of the adapter that served the call.
All null for what came before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("adapters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("digest", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("probe", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("proof", sa.JSON(), nullable=True))
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("adapter_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_column("adapter_digest")
    with op.batch_alter_table("adapters", schema=None) as batch_op:
        batch_op.drop_column("proof")
        batch_op.drop_column("probe")
        batch_op.drop_column("digest")
