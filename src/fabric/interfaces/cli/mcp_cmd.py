"""``fabric mcp``: the MCP servers of the config (``list``: each started the way a run starts
it, confined, with the sandbox of the first pack that uses it, in an empty temporary workspace,
its tools listed, and stopped again) and fabric as an MCP server (``serve``: the packs as tools
on stdin and stdout, for an MCP client to start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .options import ConfigOpt, JsonOpt
from .startup import load

mcp_app = typer.Typer(
    help="MCP: the servers packs use (list), and the packs as an MCP server (serve).",
    no_args_is_help=True,
)


@mcp_app.command(name="serve")
def serve(config: ConfigOpt = None) -> None:
    """Offer every pack of fabric.yaml as an MCP tool, and the runs as resources, on stdin and
    stdout: register this command in an MCP client (see the README). Workspaces are folders
    under serve.workspace_roots; logs go to stderr."""
    import asyncio
    import logging
    import sys

    loaded = load(config, False)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if sys.__stdout__ is not None:  # the protocol's wire: the SDK takes the real stdout
        sys.stdout = sys.__stdout__
    from fabric.interfaces.compose import build_runner
    from fabric.interfaces.mcp.server import serve_stdio, workspace_roots

    async def go() -> None:
        runner = build_runner(loaded)
        try:
            await serve_stdio(runner, workspace_roots(loaded))
        finally:
            await runner.aclose()

    asyncio.run(go())


@mcp_app.command(name="list")
def list_servers(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Start each MCP server of fabric.yaml, say whether it starts and list its tools as runs
    name them (server__tool); exit 1 when one does not start."""
    import asyncio
    import json

    loaded = load(config, as_json)
    rows = asyncio.run(_report(loaded))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    elif not rows:
        typer.echo(f"no mcp_servers in {loaded.source}")
    for row in [] if as_json else rows:
        head = f"{row['server']} ({row['transport']}: {row['target']})"
        if row["error"]:
            typer.echo(f"{head}: does not start\n  {row['error']}")
            continue
        typer.echo(f"{head}: starts, {len(row['tools'])} tools, protocol {row['protocol']}")
        for tool in row["tools"]:
            typer.echo(f"  {tool['name']}  {tool['description'][:70]}")
        for out in row["left_out"]:
            typer.echo(f"  (left out: {out['tool']}: {out['why']})")
    if any(r["error"] for r in rows):
        raise typer.Exit(1)


async def _report(loaded: Any) -> list[dict[str, Any]]:
    import shutil
    import tempfile

    from fabric.config.schema import McpUse, SandboxSettings
    from fabric.domain.errors import McpError
    from fabric.infrastructure.mcp.toolbox import McpToolbox
    from fabric.infrastructure.mcp.transports import Place

    rows = []
    for name, settings in loaded.config.mcp_servers.items():
        users = [p for p in loaded.config.packs.values() if any(u.server == name for u in p.mcp)]
        sandbox = users[0].sandbox if users else SandboxSettings()
        folder = Path(tempfile.mkdtemp(prefix="fabric-mcp-list-"))
        place = Place(folder, sandbox, loaded.base_dir, (loaded.runs_dir,))
        box = McpToolbox({name: settings}, [McpUse(server=name)], place)
        row: dict[str, Any] = {
            "server": name,
            "transport": settings.transport,
            "target": settings.url or " ".join([settings.command or "", *settings.args]),
            "error": None,
            "tools": [],
            "left_out": [],
            "protocol": None,
        }
        try:
            tools = await box.open()
            row["tools"] = [
                {"name": t.spec.name, "tool": t.tool, "description": t.spec.description}
                for t in tools
            ]
            row["left_out"] = box.left_out
            row["protocol"] = box.connections[name].protocol
        except McpError as exc:
            row["error"] = str(exc)
        finally:
            await box.aclose()
            shutil.rmtree(folder, ignore_errors=True)
        rows.append(row)
    return rows
