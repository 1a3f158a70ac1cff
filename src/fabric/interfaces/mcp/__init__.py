"""fabric as an MCP server (ADR 0019): every pack offered as a tool, runs and runlogs as
resources, over stdio (``fabric mcp serve``) or streamable HTTP (``/mcp`` under ``fabric
serve``). Built on the SDK's low-level ``Server``; imported only by those two, so ``import
mcp`` stays off every other path."""
