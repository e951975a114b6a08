"""prompt ids stored as what each call adds beyond its parent

Revision ID: 0011
Revises: 0010

- ``calls.prompt_offset``: how many leading prompt tokens are the parent's prompt + output, which the
  call no longer stores (``store.prompt_delta``); 0 for a call that stores its whole prompt,
  as every call before this revision does. A rollout's token bytes then grow linearly in its turns.

Downgrading writes every call's whole prompt back before the column goes.
"""

import sqlalchemy as sa
from alembic import op

from store.prompt_delta import StoredPrompt, whole_prompts

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt_offset", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    bind = op.get_bind()
    rollouts = bind.execute(sa.text("SELECT DISTINCT rollout_id FROM calls WHERE prompt_offset > 0")).scalars().all()
    for rollout_id in rollouts:
        rows = bind.execute(
            sa.text("SELECT id, parent_id, prompt_offset, prompt_ids, output_ids FROM calls WHERE rollout_id = :r"),
            {"r": rollout_id},
        ).all()
        whole = whole_prompts(StoredPrompt(i, p, o, bytes(ids), bytes(out)) for i, p, o, ids, out in rows)
        for call_id, _, offset, _, _ in rows:
            if offset:
                bind.execute(
                    sa.text("UPDATE calls SET prompt_ids = :ids WHERE id = :id"), {"ids": whole[call_id], "id": call_id}
                )
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_column("prompt_offset")
