"""What pack authors import: one place, stable names.

from fabric.sdk import FunctionTool, Pack, PackSettings, ToolContext, Workspace

A pack's own file tool opens paths through ``Workspace`` (as fabric's file tools do), never by a
path checked first and opened later: a command running meanwhile could swap a folder on that
path for a symlink out of the workspace::

    with Workspace(ctx) as ws, ws.open(path) as opened:
        data = os.read(opened.fd, 65536)
    with Workspace(ctx) as ws, ws.open_for_writing(path) as opened:
        os.write(opened.fd, b"...")   # refused for protected places and host code
"""

from fabric.application.context import ToolContext
from fabric.application.pack import Pack
from fabric.config.schema import Limits, PackSettings, SandboxSettings, WebSettings
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.tools.function_tool import FunctionTool, json_schema_of
from fabric.infrastructure.tools.library import LIBRARY, library_tools
from fabric.infrastructure.tools.workspace import Opened, Workspace, resolve_in_workspace

__all__ = [
    "LIBRARY",
    "FunctionTool",
    "Limits",
    "Opened",
    "Pack",
    "PackSettings",
    "SandboxError",
    "SandboxSettings",
    "ToolContext",
    "ToolError",
    "WebSettings",
    "Workspace",
    "json_schema_of",
    "library_tools",
    "resolve_in_workspace",
]
