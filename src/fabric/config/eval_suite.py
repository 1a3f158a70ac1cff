"""The typed shape of an eval suite (``fabric eval``): ``suite.yaml`` and ``cases/*.yaml``.

A suite is one YAML file, or a folder holding ``suite.yaml`` (cases listed there and/or one per
file in ``cases/``). Paths are relative to the file that names them. The published JSON Schema,
``src/fabric/eval-suite.schema.json``, is generated from these models (``suite_json_schema``);
a case file follows its ``#/$defs/Case``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Struct, field
from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag, field_validator

from .loader import _line_of
from .schema import McpServerSettings

Tier = Literal["easy", "medium", "hard"]
TIERS: tuple[Tier, ...] = ("easy", "medium", "hard")
CASE_ID = r"^[a-z0-9][a-z0-9._-]*$"
CHECK_KINDS = ("run", "file", "payload")
"""The key that makes a check of each kind: exactly one of them per check."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _regex(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
    return value


class CaseLimits(_Strict):
    """Bounds on each attempt of a case."""

    max_steps: int | None = Field(
        None, ge=1, description="Model calls at most (unset: the pack's own limits.max_steps)."
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="Wall-clock seconds an attempt's run may take; then it is cancelled and the "
        "attempt fails with status 'timeout' (unset: 900).",
    )


class RunCheck(_Strict):
    """A command run in the finished workspace, confined like the pack's commands and with no
    network; it passes when it exits with ``exit_code`` (and prints ``output_contains``)."""

    run: str = Field(
        min_length=1,
        description="The program and its arguments, split like a shell would but run without "
        "one (no pipes, ';' or redirections), e.g. 'python -m pytest -q'.",
    )
    exit_code: int = Field(0, description="The exit code that passes.")
    output_contains: str | None = Field(
        None, description="Text the combined output (stdout and stderr) must contain."
    )
    timeout_s: float = Field(120.0, gt=0, description="Seconds before the command is killed.")


class FileCheck(_Strict):
    """An assertion on a file of the finished workspace (symlinks leading out are refused)."""

    file: str = Field(min_length=1, description="The path, relative to the workspace.")
    exists: bool = Field(True, description="Whether the file must exist (false: must not).")
    contains: str | None = Field(None, description="Text the file must contain.")
    not_contains: str | None = Field(None, description="Text the file must not contain.")
    matches: str | None = Field(
        None, description="A Python regular expression that must match somewhere in the file."
    )

    _valid_regex = field_validator("matches")(_regex)


class PayloadCheck(_Strict):
    """An assertion on the run's ``finish_task`` payload. An attempt whose run ended without
    a payload fails it."""

    payload: str = Field(
        description="A dotted path into the payload (list items by number, e.g. "
        "'citations.0.url'); '' is the whole payload."
    )
    contains: str | None = Field(
        None, description="Text the value must contain (a non-string value as JSON)."
    )
    matches: str | None = Field(
        None, description="A Python regular expression that must match somewhere in the value."
    )
    equals: JsonValue = Field(None, description="The exact JSON value (only checked when given).")
    one_of: list[JsonValue] | None = Field(None, description="JSON values one of which it must be.")

    _valid_regex = field_validator("matches")(_regex)


def check_kind(value: Any) -> str | None:
    """Which kind of check a mapping is: the one of ``CHECK_KINDS`` among its keys."""
    if isinstance(value, BaseModel):
        value = value.model_fields_set
    if not isinstance(value, dict | set | frozenset):
        return None
    found = [kind for kind in CHECK_KINDS if kind in value]
    return found[0] if len(found) == 1 else None


Check = Annotated[
    Annotated[RunCheck, Tag("run")]
    | Annotated[FileCheck, Tag("file")]
    | Annotated[PayloadCheck, Tag("payload")],
    Discriminator(check_kind),
]


class Case(_Strict):
    """One task of a suite, with the checks that decide whether an attempt passed."""

    id: str = Field(pattern=CASE_ID, description="Unique in the suite: [a-z0-9][a-z0-9._-]*.")
    tier: Tier | None = Field(None, description="easy, medium or hard (default: the suite's).")
    pack: str | None = Field(None, description="The pack to run (default: the suite's).")
    task: str = Field(
        min_length=1, description="The task text; ${web_url} is the suite's web service."
    )
    workspace: str | None = Field(
        None,
        description="A folder copied fresh for every attempt, relative to this file "
        "(unset: an empty folder).",
    )
    limits: CaseLimits | None = Field(
        None, description="Bounds on each attempt, merged key by key over the suite's defaults."
    )
    verify: str | None = Field(
        None,
        description="How the run checks its own work before it may end completed: unset or "
        "null, the pack's own verification; 'off', none; else a command line.",
    )
    tags: list[str] = Field(default_factory=list, description="Free-form labels.")
    memory: list[Annotated[str, Field(min_length=1, max_length=4000)]] = Field(
        default_factory=list,
        max_length=100,
        description="Facts the attempt's workspace has in its memory as its run starts, as if "
        "earlier runs there had kept them (ADR 0030); every attempt starts with these and no "
        "others. The case's pack must have memory on (the suite's pack_settings).",
    )
    checks: list[Check] = Field(
        min_length=1,
        description="All must pass for an attempt to pass; none trusts the model's word.",
    )


class Defaults(_Strict):
    """Values every case gets unless it sets its own."""

    pack: str | None = Field(None, description="The pack to run.")
    tier: Tier = Field("easy", description="easy, medium or hard.")
    limits: CaseLimits = Field(default_factory=CaseLimits, description="Bounds on each attempt.")
    verify: str | None = Field(
        None, description="null: the pack's own verification; 'off': none; else a command line."
    )


class WebService(_Strict):
    """A loopback web server for the suite's runs: the static pages of a folder, and a
    SearXNG-compatible JSON search over them at ``/search?q=...&format=json``."""

    pages: str = Field("pages", description="The folder of pages, relative to the suite file.")


class Services(_Strict):
    """Services the eval starts for the whole suite, on 127.0.0.1."""

    web: WebService | None = Field(
        None, description="Static pages and a search endpoint; its URL is ${web_url}."
    )


class SuiteMcpServer(_Strict):
    """An MCP server the suite's packs may use (a fixture, like the web service): a program
    fabric starts confined like the pack's commands, with no network and nothing of fabric's
    environment but the base set."""

    command: str = Field(
        min_length=1,
        description="The program to start, by bare name (looked up on the scrubbed PATH) or "
        "as an absolute path.",
    )
    args: list[str] = Field(default_factory=list, description="The program's arguments.")
    cwd: str | None = Field(
        None,
        description="The folder the server starts in, relative to the suite file (default: "
        "the attempt's workspace). It must lie outside the suite's folder, which runs cannot "
        "read.",
    )
    protocol: Literal["auto", "legacy"] = Field(
        "auto", description="As under mcp_servers in fabric.yaml."
    )
    start_timeout: float = Field(
        20.0, gt=0, description="Seconds the server may take to start and list its tools."
    )
    call_timeout: float = Field(60.0, gt=0, description="Seconds one tool call may take.")


class Suite(_Strict):
    """A suite file (``suite.yaml``, or a single-file suite)."""

    version: Literal[1] = Field(1, description="Format version of this file.")
    name: str | None = Field(
        None,
        pattern=CASE_ID,
        description="The suite's name (default: its folder's or file's name).",
    )
    description: str = Field("", description="What the suite measures.")
    defaults: Defaults = Field(
        default_factory=Defaults, description="Merged under every case (its own keys win)."
    )
    services: Services = Field(
        default_factory=Services, description="Loopback services started for the suite."
    )
    pack_settings: dict[str, dict[str, JsonValue]] = Field(
        default_factory=dict,
        description="Pack sections (as in fabric.yaml) merged over the loaded config's, by pack "
        "name, for this eval only; ${web_url} is substituted.",
    )
    mcp_servers: dict[str, SuiteMcpServer] = Field(
        default_factory=dict,
        description="MCP servers by name added to the loaded config's for this eval only, for "
        "pack_settings to give a pack (its mcp: list).",
    )
    cases: list[Case] = Field(
        default_factory=list, description="Cases; more may come from cases/*.yaml."
    )


SCHEMA_FILE = "eval-suite.schema.json"


def schema_path() -> Traversable:
    """The published schema, shipped in the package: ``fabric/eval-suite.schema.json``
    (``suite_json_schema()`` written out; a test keeps the two the same)."""
    return resources.files("fabric").joinpath(SCHEMA_FILE)


def suite_json_schema() -> dict[str, Any]:
    """The JSON Schema of a suite file (a case file: its ``#/$defs/Case``), generated from
    these models."""
    schema = Suite.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://agent-fabric.dev/schemas/eval-suite-v1.json",
        "title": "agent-fabric eval suite, format version 1",
        "description": "A suite file for `fabric eval`: suite.yaml in a suite folder, or a "
        "single-file suite. A case file (cases/*.yaml in a suite folder) is one case, as "
        "#/$defs/Case describes. Paths are relative to the file that names them. Generated "
        "from fabric/config/eval_suite.py.",
        **schema,
    }


CheckSpec = RunCheck | FileCheck | PayloadCheck


class EvalCase(Struct, frozen=True):
    """A case with the suite's defaults applied: what one attempt runs and checks."""

    id: str
    tier: Tier
    pack: str
    task: str
    workspace: Path | None
    """The template folder copied for each attempt (None: an empty folder)."""
    max_steps: int | None
    timeout_s: float
    verify: str | None
    tags: tuple[str, ...]
    checks: tuple[CheckSpec, ...]
    where: str
    """``file:line`` of the case, for messages."""
    memory: tuple[str, ...] = ()
    """Facts the attempt's workspace remembers as its run starts (``Case.memory``)."""


class LoadedSuite(Struct, frozen=True):
    """A checked suite and where it came from."""

    name: str
    description: str
    path: Path
    """The suite as given: its folder or its single file."""
    source: str
    """The suite file (``suite.yaml`` or the single file)."""
    text: str
    content_hash: str
    """sha256 of everything an attempt depends on: the YAML files, the workspace templates
    and the web pages (not ``solutions/``)."""
    cases: tuple[EvalCase, ...]
    pages: Path | None
    """The folder the web service serves, when the suite has one."""
    pack_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    mcp_servers: Mapping[str, McpServerSettings] = field(default_factory=dict)
    """The suite's MCP servers as fabric.yaml would declare them (``cwd`` made absolute)."""

    def where(self, *loc: str | int) -> str:
        """``file:line`` of the key at ``loc`` in the suite file."""
        line = _line_of(self.text, loc)
        return f"{self.source}:{line}" if line else self.source
