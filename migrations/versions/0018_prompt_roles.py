"""token roles of every recorded prompt (store.roles)

Revision ID: 0018
Revises: 0017

- ``calls.prompt_roles``: one byte per prompt token, the ``store.records.TokenRole`` it came from (system,
  user, tool result, the model's own turn, template glue), stored as the prompt ids are: only past
  ``prompt_offset`` (``store.prompt_delta``). Null: unknown. Every call stored before this revision has
  null roles and reads as unknown; nothing else about it changes.

Downgrading drops the column (and the roles with it).
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt_roles", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_column("prompt_roles")
