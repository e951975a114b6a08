"""A private PostgreSQL cluster for the test session (initdb + pg_ctl, as the postgres user)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


def pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name)]
    if not found[-1]:
        raise RuntimeError(f"PostgreSQL's {name} is not installed; `.ci/run` installs it (apt-get install postgresql)")
    return found[-1]


def _as_postgres(command: list[str]) -> list[str]:
    # initdb refuses to run as root.
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class PostgresCluster:
    data_dir: Path
    port: int

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresCluster:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "postgres", "postgres")
            shutil.chown(self.data_dir.parent, "postgres", "postgres")
        subprocess.run(
            _as_postgres([pg_bin("initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
            check=True,
            capture_output=True,
        )
        options = f"-p {self.port} -k {self.data_dir} -c listen_addresses=127.0.0.1 -c fsync=on"
        subprocess.run(
            _as_postgres(
                [
                    pg_bin("pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-o",
                    options,
                    "-w",
                    "-l",
                    str(self.data_dir / "server.log"),
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )
        return self

    def create_database(self, name: str) -> str:
        subprocess.run(
            _as_postgres([pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name]),
            check=True,
            capture_output=True,
        )
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(
            _as_postgres([pg_bin("pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"]),
            check=False,
            capture_output=True,
        )
