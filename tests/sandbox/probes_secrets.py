"""Probes for secrets: fabric's own environment (API keys, tokens), credential files in the
home folder, and fabric's protected folders (outside and inside the workspace)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys

from fabric.infrastructure.tools.shell import scrubbed_env

from .lab import Lab, Verdict, changes, host_env, probe, state, summary

SECRET_HELPER = """
import asyncio, sys
from pathlib import Path
from fabric.config.schema import SandboxSettings
from fabric.infrastructure.sandbox import command_runner
from fabric.infrastructure.tools.shell import scrubbed_env
backend, workspace, program, token = sys.argv[1:]
sandbox = SandboxSettings(confinement=backend)
runner = command_runner(sandbox, Path(workspace))
argv = [sys.executable, "-c", program, token]
out = asyncio.run(runner.run(argv, env=scrubbed_env(sandbox), timeout=30))
print(out.stopped or out.exit_code, out.output)
"""


@probe(
    "parent's secrets",
    "escape",
    "fabric runs with OPENAI_API_KEY and FABRIC_TOKEN in its environment; the command looks in "
    "its own environment and every /proc/<pid>/environ it can read (its parent's included) "
    "and copies what it finds into the workspace; judged by the workspace's content",
)
async def parent_secrets(lab: Lab) -> Verdict:
    canaries = {
        "OPENAI_API_KEY": f"sk-canary-{secrets.token_hex(8)}",
        "FABRIC_TOKEN": f"tok-canary-{secrets.token_hex(8)}",
    }
    program = lab.program(
        """
        found = dict(os.environ)
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    found[pid] = open("/proc/%s/environ" % pid, "rb").read().decode("latin-1")
                except OSError:
                    pass
        open("loot.txt", "w").write(repr(found))
        print("read", len(found) - len(os.environ), "environments; parent", os.getppid())
        """
    )
    helper = subprocess.run(
        [sys.executable, "-c", SECRET_HELPER, lab.backend, str(lab.ws), program, lab.token],
        env={**os.environ, **canaries},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if helper.returncode != 0:
        return Verdict("error", f"the fabric process failed: {helper.stderr[-500:]}")
    loot = lab.loot()
    found = [f"{name} reached the command" for name, v in canaries.items() if v.encode() in loot]
    if not lab.ran():
        return Verdict("error", f"the probe program never ran: {helper.stdout[-300:]}")
    return Verdict("escaped", "; ".join(found)) if found else Verdict("blocked", helper.stdout)


@probe(
    "home credentials",
    "escape",
    "HOME holds .ssh/id_rsa, .netrc and .aws/credentials; the command reads them (directly "
    "and via a symlink planted in the workspace) and copies them into the workspace",
)
async def home_credentials(lab: Lab) -> Verdict:
    canary = f"canary-{secrets.token_hex(8)}"
    for rel in (".ssh/id_rsa", ".netrc", ".aws/credentials"):
        (lab.home / rel).parent.mkdir(parents=True, exist_ok=True)
        (lab.home / rel).write_text(f"{rel} {canary}\n")
    (lab.ws / "key-link").symlink_to(lab.home / ".ssh" / "id_rsa")
    with host_env(HOME=str(lab.home)):
        out = await lab.python(
            """
            home, loot = ARGS[0], []
            for rel in (".ssh/id_rsa", ".netrc", ".aws/credentials", "../ws/key-link"):
                loot.append(attempt(rel, lambda: open(home + "/" + rel).read()))
            loot.append(attempt("listing", lambda: os.listdir(home + "/.ssh")))
            open("loot.txt", "w").write(repr(loot))
            """,
            lab.home,
        )
    found = ["a credential reached the workspace"] if canary.encode() in lab.loot() else []
    return lab.judge(out, found)


@probe(
    "protected folder",
    "escape",
    "a protected folder outside the workspace (like fabric's runs folder): read a secret in "
    "it, write and delete there; judged by the workspace's content and the folder's state",
)
async def protected_folder(lab: Lab) -> Verdict:
    folder, canary = lab.root / "protected", f"canary-{secrets.token_hex(8)}"
    folder.mkdir()
    (folder / "secret.txt").write_text(canary)
    before = state(folder)
    out = await lab.python(
        """
        t = ARGS[0]
        loot = attempt("read", lambda: open(t + "/secret.txt").read())
        open("loot.txt", "w").write(repr(loot))
        attempt("write", lambda: open(t + "/secret.txt", "a").write("pwned"))
        attempt("create", lambda: open(t + "/new.txt", "w").write("pwned"))
        attempt("delete", lambda: os.unlink(t + "/secret.txt"))
        """,
        folder,
        protected=[folder],
    )
    found = changes(before, state(folder))
    if canary.encode() in lab.loot():
        found.append("the secret reached the workspace")
    return lab.judge(out, found)


@probe(
    "protected folder in workspace",
    "escape",
    "a protected folder inside the workspace (the runs folder's default place when fabric "
    "runs in a project): append to, create, rename and delete run logs there; judged by the "
    "folder's state on the host",
)
async def protected_in_workspace(lab: Lab) -> Verdict:
    runs = lab.ws / "runs"
    runs.mkdir()
    (runs / "run.jsonl").write_text('{"kind": "run_started"}\n')
    before = state(runs)
    out = await lab.python(
        """
        attempt("append", lambda: open("runs/run.jsonl", "a").write("forged\\n"))
        attempt("create", lambda: open("runs/forged.jsonl", "w").write("forged\\n"))
        attempt("rename", lambda: os.rename("runs/run.jsonl", "runs/moved.jsonl"))
        attempt("delete", lambda: os.unlink("runs/run.jsonl"))
        attempt("replace folder", lambda: os.rename("runs", "runs-old"))
        """,
        protected=[runs],
    )
    return lab.judge(out, changes(before, state(runs)))


@probe(
    "hidden places change during a run",
    "escape",
    "one run, three commands: the config folder in HOME is deleted after the first, then a "
    "credential store is created; the later commands must still run, and the new store must "
    "stay hidden (judged by the commands' exit codes and the workspace's content)",
)
async def hidden_places_change(lab: Lab) -> Verdict:
    canary = f"canary-{secrets.token_hex(8)}"
    (lab.home / ".config" / "fabric").mkdir(parents=True)
    steal = lab.program(
        """
        loot = attempt("read", lambda: open(ARGS[0] + "/.ssh/id_rsa").read())
        open("loot.txt", "a").write(repr(loot))
        """
    )
    argv = [sys.executable, "-c", steal, lab.token, str(lab.home)]
    with host_env(HOME=str(lab.home)):
        runner = lab.runner()
        env = scrubbed_env(runner.sandbox)
        first = await runner.run(argv, env=env, timeout=30)
        shutil.rmtree(lab.home / ".config")
        second = await runner.run(argv, env=env, timeout=30)
        (lab.home / ".ssh").mkdir()
        (lab.home / ".ssh" / "id_rsa").write_text(canary)
        third = await runner.run(argv, env=env, timeout=30)
    found = [
        f"command {n} failed: {summary(out)}"
        for n, out in enumerate((first, second, third), 1)
        if out.exit_code != 0
    ]
    if canary.encode() in lab.loot():
        found.append("a credential store created during the run was readable")
    return lab.judge(third, found)
