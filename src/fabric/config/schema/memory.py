"""A pack's ``memory:``: facts its runs choose to keep for later runs in the same workspace,
which those runs can search (ADR 0030). Off unless a pack turns it on."""

from __future__ import annotations

from pydantic import Field

from .base import _Strict


class MemorySettings(_Strict):
    """Memory across runs: the tools ``remember`` and ``search_memory``, over a store kept per
    workspace in fabric's data folder (``fabric memory`` lists, shows and deletes)."""

    enabled: bool = Field(
        False,
        description="Give the pack's runs the tools remember(fact) and search_memory(query) "
        "over this workspace's memories. What they keep is information for later runs, never "
        "instructions or permissions.",
    )
    fact_chars: int = Field(
        500,
        ge=20,
        le=4000,
        description="The most characters one fact may have; a longer one is refused, and the "
        "model is told to say it shorter.",
    )
    max_facts: int = Field(
        200,
        ge=1,
        le=10_000,
        description="The most facts one workspace keeps; when it has them, remember is "
        "refused until the user deletes some (fabric memory delete).",
    )
    search_results: int = Field(
        5, ge=1, le=50, description="The most facts one search_memory call returns."
    )
