"""Normal work that must still succeed inside every backend: git, venv + pip, a C build,
pytest and multiprocessing. Each step runs as the shell tool would run it; the result is
checked on the host."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

from fabric.application.commands import CommandOutcome

from .lab import Lab, Verdict, probe, summary


def _failed(step: str, out: CommandOutcome) -> Verdict:
    return Verdict("broken", f"{step}: {summary(out)}")


@probe("git init + commit", "task", "git init, add and commit (user given with -c)")
async def git_commit(lab: Lab) -> Verdict:
    git = shutil.which("git")
    if git is None:
        return Verdict("error", "git is not installed here")
    (lab.ws / "README.md").write_text("hello\n")
    who = ["-c", "user.name=Probe", "-c", "user.email=probe@example.invalid"]
    for step in (["init", "-q"], ["add", "README.md"], [*who, "commit", "-q", "-m", "first"]):
        out = await lab.run([git, *step])
        if out.exit_code != 0:
            return _failed(f"git {step[-1]}", out)
    log = subprocess.run(
        [git, "-C", str(lab.ws), "log", "--format=%s"], capture_output=True, text=True, check=False
    )
    if log.stdout.strip() != "first":
        return Verdict("broken", f"the host sees no commit: {log.stdout}{log.stderr}")
    return Verdict("works", "the host's git log shows the commit")


@probe("python -m venv (with pip)", "task", "python -m venv, then pip --version in it")
async def venv(lab: Lab) -> Verdict:
    out = await lab.run([sys.executable, "-m", "venv", "venv"], timeout=150)
    if out.exit_code != 0:
        return _failed("python -m venv", out)
    python = lab.ws / "venv" / "bin" / "python"
    out = await lab.run([python, "-m", "pip", "--version"], timeout=60)
    if out.exit_code != 0 or "pip" not in out.output:
        return _failed("pip --version", out)
    check = subprocess.run([python, "-c", "import pip"], capture_output=True, check=False)
    if check.returncode != 0:
        return Verdict("broken", "the venv does not work on the host")
    return Verdict("works", out.output.strip()[:80])


@probe("C compile + run", "task", "gcc builds a program in the workspace, which then runs")
async def c_compile(lab: Lab) -> Verdict:
    gcc = shutil.which("gcc")
    if gcc is None:
        return Verdict("error", "gcc is not installed here")
    (lab.ws / "hello.c").write_text(
        '#include <stdio.h>\nint main(void) { puts("hello from C"); return 0; }\n'
    )
    out = await lab.run([gcc, "-O1", "-o", "hello", "hello.c"], timeout=60)
    if out.exit_code != 0:
        return _failed("gcc", out)
    out = await lab.run([lab.ws / "hello"])
    host = subprocess.run([lab.ws / "hello"], capture_output=True, text=True, check=False)
    if out.output != "hello from C\n" or host.stdout != "hello from C\n":
        return _failed("./hello", out)
    return Verdict("works", "built and ran")


@probe("pytest", "task", "python -m pytest on a small test file in the workspace")
async def pytest_run(lab: Lab) -> Verdict:
    (lab.ws / "test_tiny.py").write_text(
        textwrap.dedent(
            """
            import pathlib

            def test_adds():
                assert 1 + 1 == 2

            def test_writes(tmp_path):
                (tmp_path / "f").write_text("x")
                pathlib.Path("tiny-ran").write_text("yes")
            """
        )
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tiny.py"]
    out = await lab.run(argv, timeout=60)
    if out.exit_code != 0 or not (lab.ws / "tiny-ran").exists():
        return _failed("pytest", out)
    return Verdict("works", out.output.strip().splitlines()[-1])


MP_TASK = """
import json, multiprocessing, sys

def square(x):
    return x * x

if __name__ == "__main__":
    results = {}
    for method in sys.argv[1:]:
        with multiprocessing.get_context(method).Pool(2) as pool:
            results[method] = pool.map(square, range(8))
    with open("mp.json", "w") as f:
        json.dump(results, f)
"""


async def _multiprocessing(lab: Lab, *methods: str) -> Verdict:
    (lab.ws / "mp_task.py").write_text(MP_TASK)
    out = await lab.run([sys.executable, "mp_task.py", *methods], timeout=60)
    expected = {m: [x * x for x in range(8)] for m in methods}
    path = lab.ws / "mp.json"
    if out.exit_code != 0 or not path.exists() or json.loads(path.read_text()) != expected:
        return _failed(f"Pool with {' and '.join(methods)}", out)
    return Verdict("works", f"Pool(2).map with {', '.join(methods)}")


@probe("multiprocessing (fork, spawn)", "task", "multiprocessing Pool with fork and with spawn")
async def multiprocessing_pool(lab: Lab) -> Verdict:
    return await _multiprocessing(lab, "fork", "spawn")


@probe(
    "multiprocessing (forkserver)",
    "task",
    "Pool with forkserver (Python 3.14's default on Linux), which connects over a unix socket",
    required=False,
)
async def multiprocessing_forkserver(lab: Lab) -> Verdict:
    return await _multiprocessing(lab, "forkserver")
