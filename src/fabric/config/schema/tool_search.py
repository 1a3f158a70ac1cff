"""A pack's ``tool_search:``: when a run has more tools than this, the model is offered a few
of them and a search over the rest, instead of every schema in every request (ADR 0028)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from .base import _Strict


class ToolSearchSettings(_Strict):
    """When and how a run's tools are searched rather than all offered."""

    threshold: int | None = Field(
        30,
        ge=0,
        description="With more tools than this (the pack's, its MCP servers' and fabric's "
        "additions; finish_task not counted), the model is offered only the 'always' tools, "
        "the ones it has loaded and search_tools/load_tools to find and load the rest. "
        "0 or null: every tool is always offered.",
    )
    always: list[str] = Field(
        [],
        description="Tools offered from the first step even when searching: names or globs "
        "(e.g. read_file, 'github__*'), in this order.",
    )
    search_pack_tools: bool = Field(
        False,
        description="Whether the pack's own tools (its builder's or YAML's, fabric's additions "
        "and delegate_ tools) are searched like its MCP servers' tools; false: they are "
        "offered from the first step, like 'always'.",
    )
    max_results: int = Field(
        10, ge=1, le=50, description="Tools one search_tools call names at most, best first."
    )

    def for_run(self, pack_tools: Sequence[str]) -> ToolSearchSettings:
        """These settings for a run whose own tools (not its MCP servers') are named
        ``pack_tools``: unless they are searched, they join ``always``, first."""
        if self.search_pack_tools or not pack_tools:
            return self
        return self.model_copy(update={"always": [*pack_tools, *self.always]})

    def searching(self, tools: int) -> bool:
        """Whether a run with ``tools`` tools (finish_task not counted) searches them."""
        return bool(self.threshold) and tools > (self.threshold or 0)
