"""Tool search (ADR 0028): a run with more tools than its pack's ``tool_search.threshold``
offers the model only the ``always`` tools, the ones it has loaded, ``finish_task`` and two
of fabric's own: ``search_tools`` (the best matches for a few words, by name and one-line
description) and ``load_tools`` (names whose schemas are offered from then on). Every tool
still exists: a call to one that is not loaded is told to load it first.

The ranking is ``ranking.py``'s, deterministic, so a replay finds what the run found. The
catalog is the run's whole set of tools (the pack's, its additions', its MCP servers'),
which can change during the run like the tools offered do (``ToolUpdates``); a loaded tool
that goes away is no longer offered, and is again if it comes back."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fabric.application.ports import Tool
from fabric.config.schema import ToolSearchSettings
from fabric.domain.errors import ToolError
from fabric.domain.models import ToolSpec

if TYPE_CHECKING:  # imported by a run that searches (its regexes cost a millisecond)
    from .ranking import Ranking

SEARCH_TOOL, LOAD_TOOL = "search_tools", "load_tools"
SEARCH = ToolSpec(
    SEARCH_TOOL,
    "Find tools for a job. This run has more tools than are offered to you: give a few words "
    "of what you need done (or part of a tool's name) and get the names and descriptions of "
    "the best matches; then load the ones you need with load_tools.",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "A few words of what the tool does."}
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
LOAD = ToolSpec(
    LOAD_TOOL,
    "Load tools by name (as search_tools gives them): they are offered to you, with their "
    "parameters, from your next step on.",
    {
        "type": "object",
        "properties": {
            "names": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The names of the tools to load.",
            }
        },
        "required": ["names"],
        "additionalProperties": False,
    },
)
OWN = frozenset({SEARCH_TOOL, LOAD_TOOL})
MAX_LOAD = 20
"""Names one load_tools call may give."""
LINE = 160
"""Characters of a description a search result shows, at most (its first line)."""


class Catalog:
    """A searching run's tools: all of them, the ones loaded, and what is offered."""

    def __init__(self, settings: ToolSearchSettings, tools: Sequence[Tool]) -> None:
        self.settings = settings
        self.tools: list[Tool] = []
        self.loaded: list[str] = []
        """The names the model loaded, in order (offered while the tool exists)."""
        self._fresh: list[str] = []
        self._index: Ranking | None = None
        self.update(tools)

    @classmethod
    def for_run(cls, settings: ToolSearchSettings | None, tools: Sequence[Tool]) -> Catalog | None:
        """The catalog of a run with ``tools`` when its settings have it search (None: every
        tool is offered; so it is when every one would be, or when one of them is named
        ``search_tools`` or ``load_tools``)."""
        if settings is None or not settings.searching(len(tools)):
            return None
        if any(t.spec.name in OWN for t in tools):  # a tool of the run has the name: it keeps it
            return None
        catalog = cls(settings, tools)
        return catalog if len(catalog.offered()) < len(tools) else None  # nothing to search

    def update(self, tools: Sequence[Tool]) -> None:
        """The run's tools are ``tools`` from now on (every one but ``finish_task``)."""
        if [t.spec for t in tools] != [t.spec for t in self.tools]:
            self._index = None
        self.tools = list(tools)

    def offered(self) -> list[Tool]:
        """The tools offered now: those ``always`` names (each pattern's in name order; the
        pack's own tools come first there), then the loaded ones in the order they were
        loaded."""
        by_name = {t.spec.name: t for t in self.tools}
        names: dict[str, None] = {}
        for pattern in self.settings.always:
            names |= dict.fromkeys(sorted(n for n in by_name if fnmatchcase(n, pattern)))
        names |= dict.fromkeys(n for n in self.loaded if n in by_name)
        return [by_name[n] for n in names]

    def fresh(self) -> list[str]:
        """The names loaded since the last time this was asked (the next request offers
        them: ``llm_request.tools_loaded``)."""
        fresh, self._fresh = self._fresh, []
        return fresh

    def search(self, arguments: Mapping[str, Any]) -> str:
        """``search_tools``: the best matches for the query, one line each."""
        from .ranking import MAX_QUERY, words

        query = arguments.get("query")
        if not isinstance(query, str) or not words(query[:MAX_QUERY]):
            raise ToolError(
                "search_tools needs a query with words to search for",
                hint='say in a few words what the tool should do, e.g. {"query": "convert '
                'currency"}',
            )
        found = self._ranked(query)
        total = len(self.tools)
        if not found:
            return (
                f"No tool matches {_clip(query)!r} among the run's {total} tools. Try other "
                "words: what the tool does, or part of its name."
            )
        offered = {t.spec.name for t in self.offered()}
        shown = found[: self.settings.max_results]
        by_name = {t.spec.name: t.spec for t in self.tools}
        more = len(found) - len(shown)
        lines = [
            f"{len(shown)} of the run's {total} tools match, best first"
            f"{f' ({more} more match less well)' if more else ''}. Load the ones you need "
            "with load_tools; those marked (loaded) are offered already:"
        ]
        for name in shown:
            mark = " (loaded)" if name in offered else ""
            lines.append(f"- {name}{mark}: {_first_line(by_name[name].description)}")
        return "\n".join(lines)

    def load(self, arguments: Mapping[str, Any]) -> str:
        """``load_tools``: the named tools are offered from the next request on."""
        names = _names(arguments.get("names"))
        if not names:
            raise ToolError(
                "load_tools needs the names of the tools to load",
                hint='give them as a list, e.g. {"names": ["a_tool"]}; search_tools finds them',
            )
        if len(names) > MAX_LOAD:
            raise ToolError(
                f"load_tools takes at most {MAX_LOAD} names a call, not {len(names)}",
                hint="load the few tools you need now, and more later if you need them",
            )
        known = {t.spec.name for t in self.tools}
        offered = {t.spec.name for t in self.offered()}
        done, already, unknown = [], [], []
        for name in names:
            if name not in known:
                unknown.append(name)
            elif name in offered or name in done:
                already.append(name)
            else:
                done.append(name)
        self.loaded += done
        self._fresh += done
        missing = [f"{_clip(n)!r}{self._guess(n)}" for n in unknown]
        if not done and not already:
            raise ToolError(
                f"no tool of this run is named {'; '.join(missing)}",
                hint="use the names exactly as search_tools gives them",
            )
        lines = []
        if done:
            lines.append(
                f"Loaded {', '.join(done)}: offered to you with their parameters from your "
                "next step on."
            )
        if already:
            lines.append(f"Offered already: {', '.join(already)}.")
        if missing:
            lines.append(f"Not loaded, no tool of this run has the name {'; '.join(missing)}.")
        return "\n".join(lines)

    def refusal(self, name: str, offered: Sequence[str]) -> ToolError:
        """Why a call of ``name``, a tool not offered now, cannot run."""
        if any(t.spec.name == name for t in self.tools):
            return ToolError(
                f"the tool {_clip(name)} exists but is not loaded",
                hint=f'load it first: call load_tools with {{"names": ["{name}"]}}',
            )
        return ToolError(
            f"unknown tool {_clip(name)!r}{self._guess(name)}",
            hint=f"offered now: {', '.join(offered)}; search_tools finds the run's other "
            "tools by what they do",
        )

    def definitions(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The tool definitions of ``names`` (those the run has), for the runlog."""
        wanted = set(names)
        return [t.spec.as_openai() for t in self.tools if t.spec.name in wanted]

    def meta(self) -> dict[str, Any]:
        """For ``run_started.tool_search``: the settings, and every tool's definition (the
        requests carry only the ones offered; a replay searches the same catalog)."""
        return {
            "tools": len(self.tools),
            "threshold": self.settings.threshold,
            "always": list(self.settings.always),
            "max_results": self.settings.max_results,
            "catalog": [t.spec.as_openai() for t in self.tools],
        }

    def _ranked(self, query: str) -> list[str]:
        if self._index is None:
            from .ranking import Ranking

            self._index = Ranking([t.spec for t in self.tools])
        return self._index.ranked(query)

    def _guess(self, name: str) -> str:
        """`` (did you mean a, b?)`` for a name the run has no tool of, or nothing."""
        import difflib  # only for a mistake: not at every run's start

        names = sorted(t.spec.name for t in self.tools)
        near = [n for n in names if n.endswith(f"__{name}")]  # the server's prefix left out
        near += difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        near += self._ranked(name)[:2]
        near = list(dict.fromkeys(near))[:3]
        return f" (did you mean {', '.join(near)}?)" if near else ""


def recorded_settings(started: Mapping[str, Any]) -> ToolSearchSettings | None:
    """The tool search a recorded run did (its ``run_started.tool_search``), for a replay or
    a resume of it, which searches as it did; None when it offered every tool."""
    searched = started.get("tool_search")
    if not isinstance(searched, Mapping):
        return None
    try:
        return ToolSearchSettings.model_validate(
            {k: searched[k] for k in ("threshold", "always", "max_results") if k in searched}
        )
    except ValidationError:
        return None


def _names(value: Any) -> list[str]:
    """The names a load_tools call gives: a list, or (a small model's way) one string of
    names separated by commas or spaces."""
    if isinstance(value, str):
        value = re.split(r"[,\s]+", value)
    if not isinstance(value, list):
        return []
    return [v.strip()[:200] for v in value if isinstance(v, str) and v.strip()]


def _first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= LINE else line[: LINE - 1] + "…"


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "LOAD",
    "LOAD_TOOL",
    "OWN",
    "SEARCH",
    "SEARCH_TOOL",
    "Catalog",
    "recorded_settings",
]
