"""who wrote a call's output, and no sampler log-probs where the policy did not sample

Revision ID: 0013
Revises: 0012

- ``calls.source``: "policy" (the engine sampled the output), "teacher" (an external model served the
  call through harnessrl.teachers.teacher) or "demonstration" (a task's solution played as the agent's calls).
  Existing calls are the policy's, except those of rollouts whose meta names a teacher.
- ``calls.output_logprobs`` becomes nullable: a call the policy did not sample stores none (it stored
  0.0 per token before, a probability of 1 nobody sampled); existing teacher calls are set to null.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.String(length=20), nullable=False, server_default="policy"))
        batch_op.alter_column("output_logprobs", existing_type=sa.LargeBinary(), nullable=True)
    rollouts, calls = (
        sa.table("rollouts", sa.column("id"), sa.column("meta", sa.JSON)),
        sa.table("calls", sa.column("rollout_id"), sa.column("source"), sa.column("output_logprobs")),
    )
    bind = op.get_bind()
    by_source: dict[str, list[int]] = {"teacher": [], "demonstration": []}
    for row in bind.execute(sa.select(rollouts.c.id, rollouts.c.meta)):
        teacher = row.meta.get("teacher") if isinstance(row.meta, dict) else None
        if teacher:  # "solutions" is the demonstrations' teacher (harnessrl.teachers.demonstrations.SOLUTIONS)
            by_source["demonstration" if teacher == "solutions" else "teacher"].append(row.id)
    for source, ids in by_source.items():
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            bind.execute(
                calls.update().where(calls.c.rollout_id.in_(chunk)).values(source=source, output_logprobs=None)
            )


def downgrade() -> None:
    calls = sa.table("calls", sa.column("output_logprobs"))
    op.get_bind().execute(calls.update().where(calls.c.output_logprobs.is_(None)).values(output_logprobs=b""))
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.alter_column("output_logprobs", existing_type=sa.LargeBinary(), nullable=False)
        batch_op.drop_column("source")
