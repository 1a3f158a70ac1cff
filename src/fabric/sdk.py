"""What pack authors import: one place, stable names.

from fabric.sdk import FunctionTool, Pack, PackSettings, ToolContext, resolve_in_workspace
"""

from fabric.application.context import ToolContext
from fabric.application.pack import Pack
from fabric.config.schema import Limits, PackSettings, SandboxSettings, WebSettings
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.tools.function_tool import FunctionTool, json_schema_of
from fabric.infrastructure.tools.library import LIBRARY, library_tools
from fabric.infrastructure.tools.workspace import resolve_in_workspace

__all__ = [
    "LIBRARY",
    "FunctionTool",
    "Limits",
    "Pack",
    "PackSettings",
    "SandboxError",
    "SandboxSettings",
    "ToolContext",
    "ToolError",
    "WebSettings",
    "json_schema_of",
    "library_tools",
    "resolve_in_workspace",
]
