"""The sandbox escape matrix: every probe by every backend -> blocked / ESCAPED (tasks: works /
BROKEN), judged by effects on the real host, never by what the confined program says.

    python bench/escape_matrix.py                 # run, print, write docs/sandbox-escape-matrix.md
    python bench/escape_matrix.py --no-doc        # print only
    python bench/escape_matrix.py --probe unix    # only probes whose name contains 'unix'
    python bench/escape_matrix.py --json          # the results as JSON

The probes are the ones tests/sandbox runs (tests/sandbox/probes.py), so the table and the
tests cannot drift apart. The ``none`` column is the reference: what an unconfined command
(still under fabric's launcher and limits) can do on this machine; probes that would change the
host in ways not undone afterwards are not run there. Exit status 1 when a confining backend
let an escape through or broke a required task. About a minute on a 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from sandbox.host import confining_backends  # noqa: E402
from sandbox.probes import PROBES, Probe, Verdict, run_probe  # noqa: E402

from fabric.infrastructure.sandbox import host_report  # noqa: E402

DOC = ROOT / "docs" / "sandbox-escape-matrix.md"
MARK = {
    "blocked": "blocked",
    "escaped": "**ESCAPED**",
    "works": "works",
    "broken": "**BROKEN**",
    "not run": "n/a",
    "error": "error",
}


def run_matrix(
    probes: list[Probe], backends: list[str], *, quiet: bool = False
) -> dict[str, dict[str, Verdict]]:
    results: dict[str, dict[str, Verdict]] = {}
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
                    f"  {item.name:36} {backend:9} {row[backend].outcome:8} {took:5.1f}s",
                    file=sys.stderr,
                    flush=True,
                )
    return results


def failures(
    probes: list[Probe], results: dict[str, dict[str, Verdict]]
) -> list[tuple[str, str, Verdict]]:
    """Escapes under a confining backend and required tasks that broke."""
    found = []
    for item in probes:
        for backend, verdict in results[item.name].items():
            if backend == "none":
                continue
            bad = verdict.outcome in ("escaped", "error")
            if item.kind == "task":
                bad = item.required and verdict.outcome != "works"
            if bad:
                found.append((item.name, backend, verdict))
    return found


def table(probes: list[Probe], backends: list[str], results: dict[str, dict[str, Verdict]]) -> str:
    lines = [
        "| probe | " + " | ".join(backends) + " |",
        "|---|" + "---|" * len(backends),
    ]
    for kind, title in (("escape", "escape probes"), ("task", "normal work")):
        lines.append(f"| *{title}* |" + " |" * len(backends))
        for item in (p for p in probes if p.kind == kind):
            cells = [MARK[results[item.name][b].outcome] for b in backends]
            lines.append(f"| {item.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=96, break_on_hyphens=False)


def machine() -> list[str]:
    report = host_report()
    return [
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- kernel: Linux {platform.release()} ({platform.machine()})",
        f"- bubblewrap: {report.bwrap_version or 'not installed'}"
        + (f" (does not work here: {report.bwrap_error})" if report.bwrap_error else ""),
        f"- Landlock ABI: {report.landlock_abi or 'none'}"
        + (f" (does not work here: {report.landlock_error})" if report.landlock_error else ""),
        f"- seccomp filter: {'yes' if report.seccomp else 'no (architecture not supported)'}",
        f"- cgroup: {report.cgroup or 'none (rlimits only)'}",
        f"- running as: {'root' if report.root else f'uid {os.getuid()}'}",
        f"- python: {platform.python_version()}",
    ]


def document(
    probes: list[Probe], backends: list[str], results: dict[str, dict[str, Verdict]]
) -> str:
    parts = [
        "# Sandbox escape matrix",
        "",
        _wrap(
            "Written by `python bench/escape_matrix.py` (do not edit by hand; run it again). "
            "The same probes run in the test suite (`tests/sandbox/`, once per confining "
            "backend the machine offers; CI requires bubblewrap), where anything but *blocked* "
            "fails."
        ),
        "",
        "## Machine",
        "",
        *machine(),
        "",
        "## Matrix",
        "",
        _wrap(
            "Each probe is judged by its effect on the real host (files, canary servers, the "
            "host's `/proc`, kernel settings), never by what the confined program reports. "
            "*none* is the reference column: what a command run with `sandbox.confinement: "
            "none` (still under fabric's launcher, limits and cgroup) can do here; *n/a* there "
            "means the probe is not run unconfined because it would change the host."
        ),
        "",
        table(probes, backends, results),
        "",
    ]
    bad = failures(probes, results)
    parts += ["## Escapes and breakages under a confining backend", ""]
    if bad:
        parts += [
            _wrap(f"- **{name}** under {backend}: {v.detail}").replace("\n", "\n  ")
            for name, backend, v in bad
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
        for backend in backends:
            detail = " ".join(results[item.name][backend].detail.split())[:220]
            parts.append(f"  - {backend}: {results[item.name][backend].outcome}: {detail}")
    return "\n".join(parts) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", action="append", help="only probes whose name contains this")
    parser.add_argument("--no-doc", action="store_true", help="do not write the document")
    parser.add_argument("--doc", type=Path, default=DOC, help=f"where to write it ({DOC})")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    probes = [p for p in PROBES if not args.probe or any(s in p.name for s in args.probe)]
    backends = [b for b in confining_backends() if b != "bwrap" or not host_report().bwrap_error]
    backends.append("none")
    results = run_matrix(probes, backends, quiet=args.json)
    if args.json:
        data = {n: {b: asdict(v) for b, v in row.items()} for n, row in results.items()}
        print(json.dumps(data, indent=2))
    else:
        print(table(probes, backends, results))
    bad = failures(probes, results)
    for name, backend, verdict in bad:
        print(f"{name} under {backend}: {verdict.outcome}: {verdict.detail}", file=sys.stderr)
    if not args.no_doc and not args.probe:
        args.doc.write_text(document(probes, backends, results))
        print(f"wrote {args.doc}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
