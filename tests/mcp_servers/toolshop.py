"""A small MCP server for fabric's tests, written with the SDK's low-level ``Server``: its
tools come two to a page, and it can be slow, crash, change its tool list, return images and
structured content. Run: python toolshop.py [--legacy-notify] on stdio, or
python toolshop.py --http PORT: streamable HTTP on 127.0.0.1:PORT at /mcp, answering only
requests whose X-Shop-Key header is $SHOP_KEY."""

from __future__ import annotations

import base64
import os
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}
TOOLS = [
    types.Tool(name="echo", description="Say the text back.", input_schema=OBJECT),
    types.Tool(name="read_file", description="Same name as a built-in tool.", input_schema=OBJECT),
    types.Tool(name="picture", description="A tiny image.", input_schema={"type": "object"}),
    types.Tool(name="facts", description="Structured content.", input_schema={"type": "object"}),
    types.Tool(name="slow", description="Takes a minute.", input_schema={"type": "object"}),
    types.Tool(name="crash", description="Exits at once.", input_schema={"type": "object"}),
    types.Tool(name="fail", description="Reports an error.", input_schema={"type": "object"}),
    types.Tool(
        name="env", description="Names of its environment.", input_schema={"type": "object"}
    ),
    types.Tool(name="grow", description="Adds a tool.", input_schema={"type": "object"}),
    types.Tool(name="weird.name/" + "x" * 80, description="A long odd name.", input_schema=OBJECT),
    types.Tool(
        name="bad_schema",
        description="Not an object.",
        input_schema={"type": "object", "properties": {"x": {"type": "nonsense"}}},
    ),
]
EXTRA = types.Tool(name="added", description="Came later.", input_schema={"type": "object"})
STATE = {"grown": False}
PAGE = 2


def text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)])


async def list_tools(ctx, params):  # type: ignore[no-untyped-def]
    tools = TOOLS + ([EXTRA] if STATE["grown"] else [])
    start = int(params.cursor) if params is not None and params.cursor else 0
    following = start + PAGE
    return types.ListToolsResult(
        tools=tools[start:following], next_cursor=str(following) if following < len(tools) else None
    )


async def call_tool(ctx, params):  # type: ignore[no-untyped-def]
    name, args = params.name, params.arguments or {}
    if name in ("echo", "added") or name.startswith("weird"):
        return text(f"echo: {args.get('text', '')} (cwd {os.getcwd()})")
    if name == "read_file":
        return text("the server's read_file")
    if name == "picture":
        data = base64.b64encode(b"\x89PNG fake").decode()
        return types.CallToolResult(
            content=[
                types.TextContent(type="text", text="here it is"),
                types.ImageContent(type="image", data=data, mime_type="image/png"),
            ]
        )
    if name == "facts":
        return types.CallToolResult(content=[], structured_content={"answer": 42})
    if name == "slow":
        await anyio.sleep(60)
        return text("finally")
    if name == "crash":
        print("toolshop: crashing on purpose", file=sys.stderr, flush=True)
        os._exit(3)
    if name == "fail":
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="no luck")], is_error=True
        )
    if name == "env":
        return text(" ".join(sorted(os.environ)))
    if name == "grow":
        STATE["grown"] = True
        await ctx.session.send_tool_list_changed()
        return text("grown")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="unknown")], is_error=True
    )


server = Server("toolshop", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    print("toolshop: starting", file=sys.stderr, flush=True)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    key = os.environ["SHOP_KEY"].encode()

    async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and dict(scope["headers"]).get(b"x-shop-key") != key:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no key"})
            return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if "--http" in sys.argv:
        serve_http(int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        anyio.run(main)
