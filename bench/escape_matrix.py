"""The sandbox escape matrix: every probe by every backend and user -> blocked / ESCAPED (tasks:
works / BROKEN), judged by effects on the real host, never by what the confined program says.

    python bench/escape_matrix.py                 # run, print, write docs/sandbox-escape-matrix.md
    python bench/escape_matrix.py --no-doc        # print only
    python bench/escape_matrix.py --probe unix    # only probes whose name contains 'unix'
    python bench/escape_matrix.py --user nobody   # only as nobody (root only)
    python bench/escape_matrix.py --json          # the results as JSON

The probes are the ones tests/sandbox runs (tests/sandbox/probes.py), so the table and the
tests cannot drift apart. The ``none`` column is the reference: what an unconfined command
(still under fabric's launcher and limits) can do on this machine; probes that would change the
host in ways not undone afterwards are not run there.

Run by root, the matrix is run twice: as root and as ``nobody``, where the backends work
differently (no cgroup, a user namespace for Landlock, the process limit applies). Another
user's run is this script again, started with setpriv (``sandbox.host.as_user``) with a lab
folder that user owns (``FABRIC_SANDBOX_LAB``); the interpreter, the repository and the lab must
be reachable by it, and where a folder on the way is closed to it (a home folder of mode 0700
holding the interpreter), that run sees the folder as an empty one holding only those paths.
Exit status 1 when a confining backend let an escape through or broke a required task. About
two minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from sandbox.host import as_user, closed_folders, confining_backends  # noqa: E402
from sandbox.lab import lab_base  # noqa: E402
from sandbox.probes import PROBES, Probe, Verdict, run_probe  # noqa: E402

from fabric.infrastructure.sandbox import HostReport, host_report  # noqa: E402

DOC = ROOT / "docs" / "sandbox-escape-matrix.md"
MARK = {
    "blocked": "blocked",
    "escaped": "**ESCAPED**",
    "works": "works",
    "broken": "**BROKEN**",
    "not run": "n/a",
    "error": "error",
}
OTHER_USER = "nobody"
"""The unprivileged user root runs the matrix as too."""
_PASSED_ON = ("PATH", "PYTHONPATH", "CI", "LANG", "LC_ALL")
"""The only parts of root's environment another user's run gets."""

Results = dict[str, dict[str, Verdict]]


@dataclass
class UserRun:
    """The matrix as one user: the backends it was run under and each probe's verdicts."""

    user: str
    uid: int
    setup: str
    """What this user gets here (backends, namespaces, cgroup)."""
    backends: list[str]
    results: Results
    seconds: float
    note: str = ""
    """How the run was arranged, when it matters (see ``as_user``)."""
    columns: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.columns = [f"{b} ({self.user})" for b in self.backends]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UserRun:
        results = {
            name: {b: Verdict(**v) for b, v in row.items()} for name, row in data["results"].items()
        }
        fields = {k: v for k, v in data.items() if k not in ("results", "columns")}
        return cls(**fields, results=results)


def run_matrix(probes: list[Probe], backends: list[str], *, quiet: bool = False) -> Results:
    user = pwd.getpwuid(os.geteuid()).pw_name
    results: Results = {}
    for item in probes:
        row = results.setdefault(item.name, {})
        for backend in backends:
            if backend == "none" and not item.unconfined:
                row[backend] = Verdict("not run", "not run unconfined: it would change the host")
                continue
            started = time.monotonic()
            row[backend] = run_probe(item, backend)
            if not quiet:
                took = time.monotonic() - started
                print(
                    f"  {user:8} {item.name:36} {backend:9} {row[backend].outcome:8} {took:5.1f}s",
                    file=sys.stderr,
                    flush=True,
                )
    return results


def setup(report: HostReport) -> str:
    """What a command gets here as the user running this: backends, namespaces, cgroup."""
    bwrap = "works" if report.bwrap_error is None else f"does not work ({report.bwrap_error})"
    if report.landlock_error:
        landlock = f"does not work ({report.landlock_error})"
    elif not report.landlock_namespaces:
        landlock = "alone (no user namespaces here: no private mounts, host processes listed)"
    elif report.root:
        landlock = "with mount and pid namespaces"
    else:
        landlock = "with a user namespace (and mount and pid namespaces in it)"
    cgroup = f"cgroup {report.cgroup}" if report.cgroup else "no cgroup (rlimits only)"
    return f"bubblewrap {bwrap}; Landlock {landlock}; {cgroup}"


def this_user(probes: list[Probe], *, reference: bool, quiet: bool) -> UserRun:
    report = host_report()
    backends = [b for b in confining_backends() if b != "bwrap" or not report.bwrap_error]
    if reference:
        backends.append("none")
    started = time.monotonic()
    results = run_matrix(probes, backends, quiet=quiet)
    me = pwd.getpwuid(os.geteuid())
    took = round(time.monotonic() - started, 1)
    return UserRun(me.pw_name, me.pw_uid, setup(report), backends, results, took)


def other_user(name: str, args: argparse.Namespace) -> UserRun:
    """The matrix as ``name``: this script again, as that user, with a lab it owns."""
    if os.geteuid() != 0:
        raise SystemExit(f"only root can run the matrix as another user ({name})")
    user = pwd.getpwnam(name)
    base = lab_base()
    base.mkdir(parents=True, exist_ok=True)
    lab = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
    os.chown(lab, user.pw_uid, user.pw_gid)
    argv = [sys.executable, str(Path(__file__).resolve()), "--json", "--no-doc", "--user", name]
    argv += [a for p in args.probe or [] for a in ("--probe", p)]
    argv += ["--no-reference"] if args.no_reference else []
    argv += ["--quiet"] if args.quiet else []
    env = {k: os.environ[k] for k in _PASSED_ON if k in os.environ}
    env |= {"HOME": user.pw_dir, "FABRIC_SANDBOX_LAB": str(lab), "PYTHONDONTWRITEBYTECODE": "1"}
    needed = [Path(p) for p in (sys.executable, sys.prefix, sys.base_prefix, ROOT, lab)]
    needed += [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    try:
        done = subprocess.run(
            as_user(user, argv, needed),
            env=env,
            cwd=lab,
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        shutil.rmtree(lab, ignore_errors=True)
        with contextlib.suppress(OSError):
            base.rmdir()  # only when no other lab is left in it
    try:
        run = UserRun.from_json(json.loads(done.stdout)[0])
    except (ValueError, LookupError, TypeError) as exc:
        raise SystemExit(f"the run as {name} failed (exit {done.returncode}): {exc}") from None
    closed = closed_folders(user, needed)
    if closed:
        shown = "; ".join(
            f"{f} (closed to {name} here) shows only {', '.join(map(str, e))}"
            for f, e in closed.items()
        )
        run.note = f"run in a mount namespace where {shown}"
    return run


def failures(probes: list[Probe], runs: list[UserRun]) -> list[tuple[str, str, Verdict]]:
    """Escapes under a confining backend and required tasks that broke, by any user."""
    found = []
    for run in runs:
        for item in probes:
            for backend, verdict in run.results[item.name].items():
                if backend == "none":
                    continue
                bad = verdict.outcome in ("escaped", "error")
                if item.kind == "task":
                    bad = item.required and verdict.outcome != "works"
                if bad:
                    found.append((item.name, f"{backend} as {run.user}", verdict))
    return found


def table(probes: list[Probe], runs: list[UserRun]) -> str:
    columns = [c for run in runs for c in run.columns]
    lines = ["| probe | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for kind, title in (("escape", "escape probes"), ("task", "normal work")):
        lines.append(f"| *{title}* |" + " |" * len(columns))
        for item in (p for p in probes if p.kind == kind):
            cells = [MARK[run.results[item.name][b].outcome] for run in runs for b in run.backends]
            lines.append(f"| {item.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=96, break_on_hyphens=False)


def machine(probes: list[Probe], runs: list[UserRun]) -> list[str]:
    report = host_report()
    lines = [
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- kernel: Linux {platform.release()} ({platform.machine()})",
        f"- bubblewrap: {report.bwrap_version or 'not installed'}",
        f"- Landlock ABI: {report.landlock_abi or 'none'}",
        f"- seccomp filter: {'yes' if report.seccomp else 'no (architecture not supported)'}",
        f"- python: {platform.python_version()}",
    ]
    for run in runs:
        cells = len(probes) * len(run.backends)
        text = (
            f"- as {run.user} (uid {run.uid}): {run.setup}. {len(probes)} probes x "
            f"{len(run.backends)} backends ({cells} cells) in {run.seconds:.0f} s"
            + (f"; {run.note}" if run.note else "")
            + "."
        )
        lines.append(_wrap(text).replace("\n", "\n  "))
    return lines


def document(probes: list[Probe], runs: list[UserRun]) -> str:
    parts = [
        "# Sandbox escape matrix",
        "",
        _wrap(
            "Written by `python bench/escape_matrix.py` (do not edit by hand; run it again). "
            "The same probes run in the test suite (`tests/sandbox/`, once per confining "
            "backend the machine offers, and as `nobody` too when the suite runs as root; CI "
            "requires bubblewrap), where anything but *blocked* fails."
        ),
        "",
        "## Machine",
        "",
        *machine(probes, runs),
        "",
        "## Matrix",
        "",
        _wrap(
            "Each probe is judged by its effect on the real host (files, canary servers, the "
            "host's `/proc`, kernel settings), never by what the confined program reports. "
            "Each column is a backend and the user fabric runs as. *none* is the reference "
            "column: what a command run with `sandbox.confinement: none` (still under fabric's "
            "launcher, limits and cgroup) can do here; *n/a* there means the probe is not run "
            "unconfined because it would change the host."
        ),
        "",
        table(probes, runs),
        "",
    ]
    bad = failures(probes, runs)
    parts += ["## Escapes and breakages under a confining backend", ""]
    if bad:
        parts += [
            _wrap(f"- **{name}** under {where}: {v.detail}").replace("\n", "\n  ")
            for name, where, v in bad
        ]
    else:
        parts.append("None.")
    parts += ["", "## The probes", ""]
    for item in probes:
        note = "" if item.required else " (informational: not required by the tests)"
        parts.append(_wrap(f"- **{item.name}**: {item.what}{note}.").replace("\n", "\n  "))
    parts += [
        "",
        "## Details",
        "",
        "What the host measured or the command met, per cell (truncated).",
        "",
    ]
    for item in probes:
        parts.append(f"- {item.name}")
        for run in runs:
            for backend, column in zip(run.backends, run.columns, strict=True):
                verdict = run.results[item.name][backend]
                detail = " ".join(verdict.detail.split())[:220]
                parts.append(f"  - {column}: {verdict.outcome}: {detail}")
    return "\n".join(parts) + "\n"


def _users(asked: list[str] | None) -> list[str]:
    """The users to run as: those asked for, else this one, and nobody too when root."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    if asked:
        return asked
    users = [me]
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(OTHER_USER)
            users.append(OTHER_USER)
        except KeyError:
            print(f"no user {OTHER_USER} here: the matrix runs as {me} only", file=sys.stderr)
    return users


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", action="append", help="only probes whose name contains this")
    parser.add_argument(
        "--user",
        action="append",
        help=f"run as this user (default: this one, and {OTHER_USER} when root)",
    )
    parser.add_argument("--no-reference", action="store_true", help="leave out the none column")
    parser.add_argument("--no-doc", action="store_true", help="do not write the document")
    parser.add_argument("--doc", type=Path, default=DOC, help=f"where to write it ({DOC})")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args()
    probes = [p for p in PROBES if not args.probe or any(s in p.name for s in args.probe)]
    me = pwd.getpwuid(os.geteuid()).pw_name
    runs = [
        this_user(probes, reference=not args.no_reference, quiet=args.quiet)
        if user == me
        else other_user(user, args)
        for user in _users(args.user)
    ]
    if args.json:
        print(json.dumps([asdict(run) for run in runs], indent=2))
    else:
        print(table(probes, runs))
    bad = failures(probes, runs)
    for name, where, verdict in bad:
        print(f"{name} under {where}: {verdict.outcome}: {verdict.detail}", file=sys.stderr)
    if not args.no_doc and not args.probe:
        args.doc.write_text(document(probes, runs))
        print(f"wrote {args.doc}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
