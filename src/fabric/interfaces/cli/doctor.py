"""``fabric doctor``: what this machine offers to confine commands, and what each pack gets
(and, for a pack with web_search, whether its search backend answers)."""

from __future__ import annotations

import asyncio
import platform
import sys
from typing import Any, TextIO

import fabric
from fabric.config.loader import LoadedConfig
from fabric.domain.errors import FabricError
from fabric.infrastructure.durable.health import durable_report
from fabric.infrastructure.durable.where import database_url
from fabric.infrastructure.sandbox import INSTALL_HINT, host_report
from fabric.infrastructure.tools.search_check import search_report
from fabric.interfaces.compose import build_runner


def gather(loaded: LoadedConfig) -> dict[str, Any]:
    """Everything `fabric doctor` shows, as plain data (also its --json output)."""
    host = host_report(fresh=True)  # the doctor looks again, and refreshes the cache
    report: dict[str, Any] = {
        "fabric": fabric.__version__,
        "python": sys.version.split()[0],
        "kernel": platform.release(),
        "machine": platform.machine(),
        "config": str(loaded.source),
        "root": host.root,
        "bwrap": {
            "path": host.bwrap,
            "version": host.bwrap_version,
            "works": host.bwrap is not None and host.bwrap_error is None,
            "error": host.bwrap_error,
        },
        "landlock": {
            "abi": host.landlock_abi,
            "works": host.landlock_error is None,
            "error": host.landlock_error,
            "namespaces": host.landlock_namespaces,
        },
        "seccomp": host.seccomp,
        "cgroup": host.cgroup,
        "packs": [],
    }
    runner = build_runner(loaded)
    for name in loaded.config.packs:
        row: dict[str, Any] = {"name": name}
        try:
            lp = runner.pack(name)
        except FabricError as exc:
            row |= {"ok": False, "error": str(exc)}
            report["packs"].append(row)
            continue
        search = asyncio.run(search_report(name, lp))
        if search is not None:  # reported, but it is not about confinement: ``ok`` stays
            row["web_search"] = search
        sandbox = lp.settings.sandbox
        row["confinement"] = sandbox.confinement
        row["network"] = sandbox.network
        if not runner.starts_commands(lp):
            row |= {"ok": True, "backend": None, "note": "starts no commands"}
        else:
            try:
                chosen = host.backend(sandbox.confinement)
            except FabricError as exc:
                row |= {"ok": False, "backend": None, "error": exc.message}
            else:
                row |= {"ok": True, "backend": chosen.name, "note": chosen.reason}
        report["packs"].append(row)
    url = database_url(loaded.config.serve.durable_database, loaded.base_dir)
    report["durable"] = durable_report(url)
    report["ok"] = all(p["ok"] for p in report["packs"]) and report["durable"]["ok"]
    return report


def print_report(report: dict[str, Any], out: TextIO) -> None:
    def line(text: str = "") -> None:
        out.write(text + "\n")

    line(f"fabric {report['fabric']} · Python {report['python']} · Linux {report['kernel']} "
         f"({report['machine']}){' · running as root' if report['root'] else ''}")  # fmt: skip
    line(f"config: {report['config']}")
    line()
    line("Confinement on this machine")
    bwrap = report["bwrap"]
    if bwrap["works"]:
        line(f"  bubblewrap   works ({bwrap['version'] or 'unknown version'}, {bwrap['path']})")
    else:
        line(f"  bubblewrap   unavailable: {bwrap['error']}")
    landlock = report["landlock"]
    if landlock["works"]:
        line(f"  Landlock     works (ABI {landlock['abi']}) with the seccomp filter")
        pad = " " * 15
        if landlock["namespaces"]:
            line(f"{pad}in namespaces of its own: host code in a workspace stays read-only")
        else:  # only without root: root gets namespaces or no Landlock (ADR 0012)
            line(f"{pad}without namespaces (user namespaces are refused here): it cannot keep")
            line(f"{pad}host code in a workspace read-only (such runs are refused), nor hide")
            line(f"{pad}host processes from commands; bubblewrap can")
    else:
        line(f"  Landlock     unavailable: {landlock['error']}")
    line(
        f"  seccomp      {'filter for this CPU' if report['seccomp'] else 'no filter for this CPU'}"
    )
    if report["cgroup"]:
        line(f"  cgroups      {report['cgroup']}: process and memory caps per command")
    else:
        cap = "not at all for root" if report["root"] else "by RLIMIT_NPROC only"
        line(f"  cgroups      none writable: fork bombs are bounded {cap}")
    line()
    line("Packs")
    for pack in report["packs"]:
        if not pack["ok"]:
            line(f"  {pack['name']:<14} NOT READY: {pack['error']}")
        elif pack.get("backend") is None:
            line(f"  {pack['name']:<14} {pack['note']}")
        else:
            net = "network on" if pack["network"] else "network off"
            line(f"  {pack['name']:<14} {pack['backend']} ({pack['note']}), {net}")
        search = pack.get("web_search")
        if search and search["ok"]:
            line(f"  {'':<14} web_search: the search backend at {search['url']} answers")
        elif search:
            line(f"  {'':<14} web_search NOT READY (runs of this pack are refused): "
                 f"{search['error']['message']}")  # fmt: skip
            for hint in search["error"]["hint"].splitlines():
                line(f"  {'':<14}   {hint}")
    durable = report["durable"]
    line()
    line("Durable runs")
    if durable["ok"]:
        line(f"  database     {durable['database']} ({durable.get('note', 'answers')})")
    else:
        line(f"  database     NOT READY: {durable['database']}: {durable['error']}")
    for left in durable["unfinished"]:
        line(f"  unfinished   {left['run_id']} (process {left['owner']}): "
             f"fabric resume {left['run_id']} continues it once that process is gone")  # fmt: skip
    if not all(p["ok"] for p in report["packs"]):
        line()
        line(f"To fix: {INSTALL_HINT}.")
