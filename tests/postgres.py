"""A throwaway PostgreSQL server for the tests (Debian's `postgresql`, installed by .ci/run):
its own cluster in a temporary folder, on a free loopback port, trusting local connections,
stopped and removed afterwards. Run as the `postgres` user when the tests run as root."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from support import free_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    path = found[-1] if found else shutil.which(name)
    assert path, f"PostgreSQL's {name} is not installed (apt-get install postgresql)"
    return path


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """Start a cluster; yield the URL of a database ``fabric`` on it (DBOS makes it)."""
    root = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(prefix="fabric-pg-"))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    prefix = ["runuser", "-u", "postgres", "--"] if root else []
    if root:
        for path in (folder, sockets):
            shutil.chown(path, "postgres", "postgres")

    def run(*argv: str) -> None:
        done = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{argv[0]} failed: {done.stdout}\n{done.stderr}"

    port = free_port()
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        run(_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
            "--no-sync")  # fmt: skip
        run(_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"),
            "-w", "start")  # fmt: skip
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/fabric"
        finally:
            run(_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
