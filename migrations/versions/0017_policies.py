"""policies: named lineages of adapters (store.policies)

Revision ID: 0017
Revises: 0016

- ``adapters.policy``: the policy a version belongs to; versions are unique per policy (they were
  unique alone). The table is rebuilt: the unnamed unique constraint on ``version`` has no portable
  name to drop.
- ``rollouts.policy``: the policy serving a rollout's calls (its run's, or its pin's).
- ``calls.policy``: the policy that served a call, beside its version.

Everything stored before is the default policy ``policy``: its adapters keep their names (``policy-vN``
is ``<policy>-v<N>`` for it) and versions.
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
DEFAULT = "policy"
COPIED = ("id", "version", "name", "path", "loaded", "digest", "probe", "proof", "created_at")


def _adapters_table(name: str, unique: sa.UniqueConstraint) -> None:
    op.create_table(
        name,
        sa.Column("id", ID, nullable=False),
        sa.Column("policy", sa.String(length=64), server_default=DEFAULT, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("loaded", sa.Boolean(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=True),
        sa.Column("probe", sa.JSON(), nullable=True),
        sa.Column("proof", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", name=f"uq_{name}_name"),
        unique,
    )


def upgrade() -> None:
    _adapters_table("adapters_new", sa.UniqueConstraint("policy", "version", name="uq_adapters_policy_version"))
    columns = ", ".join(COPIED)
    op.execute(f"INSERT INTO adapters_new (policy, {columns}) SELECT '{DEFAULT}', {columns} FROM adapters")
    op.drop_table("adapters")
    op.rename_table("adapters_new", "adapters")
    if op.get_bind().dialect.name == "postgresql":  # keep id's sequence past the copied ids
        op.execute(
            "SELECT setval(pg_get_serial_sequence('adapters', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM adapters"
        )
    for table in ("rollouts", "calls"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("policy", sa.String(length=64), server_default=DEFAULT, nullable=False))


def downgrade() -> None:
    for table in ("calls", "rollouts"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("policy")
    # only the default policy's versions fit the old table (versions unique alone)
    _adapters_table("adapters_old", sa.UniqueConstraint("version", name="uq_adapters_old_version"))
    columns = ", ".join(COPIED)
    op.execute(f"INSERT INTO adapters_old ({columns}) SELECT {columns} FROM adapters WHERE policy = '{DEFAULT}'")
    op.drop_table("adapters")
    op.rename_table("adapters_old", "adapters")
