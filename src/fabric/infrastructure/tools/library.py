"""Library tools by name, for packs declared in YAML alone."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .edit import edit_file
from .files import list_files, read_file, search_files, write_file
from .function_tool import FunctionTool
from .shell import shell
from .web import fetch_url, web_search

LIBRARY: dict[str, Callable[..., Any]] = {
    "read_file": read_file,
    "write_file": write_file,
    "list_files": list_files,
    "search_files": search_files,
    "shell": shell,
    "fetch_url": fetch_url,
    "web_search": web_search,
    "edit_file": edit_file,
}


def library_tools(*names: str, bind: Mapping[str, Any] | None = None) -> list[FunctionTool]:
    """Tools from the library, in the order given; unknown names raise KeyError. ``bind``
    supplies hidden parameters (e.g. ``web``: the pack's WebSettings) to tools that take them."""
    unknown = [n for n in names if n not in LIBRARY]
    if unknown:
        raise KeyError(f"unknown tool(s) {', '.join(unknown)}; library tools: {', '.join(LIBRARY)}")
    return [FunctionTool(LIBRARY[n], bind=bind) for n in names]
