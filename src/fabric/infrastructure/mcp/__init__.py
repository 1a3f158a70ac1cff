"""MCP servers as a tool source (ADR 0019): started per run, confined like ``shell`` when
fabric starts them, their tools namespaced ``server__tool``. Imported only by a run whose
pack uses MCP servers, and by ``fabric mcp``: ``import mcp`` stays off every other path."""
