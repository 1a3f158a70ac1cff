"""A pack's tool-call policy in ``fabric.yaml`` (``sandbox.policy``): allow, ask or deny, per
tool and per argument pattern. Checked when the config loads; matching is in
``fabric.domain.policy``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from fabric.domain.policy import PATH_TOOLS, SHELL_TOOL, shell_syntax, split_command

Verdict = Literal["allow", "ask", "deny"]


class _Strict(BaseModel):
    # as fabric.config.schema.base._Strict (not imported: the schema imports this module)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class PolicyRule(_Strict):
    """One rule: a tool, optionally an argument pattern, and the verdict when it matches."""

    tool: str = Field(min_length=1, description="The tool's name, e.g. shell or write_file.")
    command: str | None = Field(
        None,
        description="shell only: a command pattern, split like a command line and matched "
        "against the call's arguments: '**' is any number of arguments, any other word a "
        "case-sensitive glob for one argument (e.g. 'git push **').",
    )
    path: str | None = Field(
        None,
        description="read_file, write_file, edit_file, list_files and search_files only: a glob "
        "for the call's workspace-relative path; '**' crosses '/', '*' and '?' do not "
        "(e.g. '**/*.lock').",
    )
    verdict: Verdict = Field(description="allow, ask (a person approves first) or deny.")

    @field_validator("command")
    @classmethod
    def _command_pattern(cls, command: str | None, info: ValidationInfo) -> str | None:
        if command is None:
            return None
        tool = info.data.get("tool")
        if tool != SHELL_TOOL:
            raise ValueError(
                f"'command' applies only to tool {SHELL_TOOL} (this rule is for {tool}); "
                "use 'path' for file tools, or drop it to match every call of the tool"
            )
        try:
            words = split_command(command)
        except ValueError as exc:
            raise ValueError(
                f"the command pattern {command!r} cannot be split like a command line ({exc}); "
                "check its quotes"
            ) from None
        if not words:
            raise ValueError("the command pattern is empty; give at least the program, e.g. 'git'")
        syntax = shell_syntax(command)
        if syntax is not None:
            raise ValueError(
                f"the command pattern holds shell syntax: {syntax}. Commands with shell syntax "
                "are always denied, so this rule could never match; quote the text if it is "
                "an argument"
            )
        return command

    @field_validator("path")
    @classmethod
    def _path_glob(cls, path: str | None, info: ValidationInfo) -> str | None:
        if path is None:
            return None
        tool = info.data.get("tool")
        if tool not in PATH_TOOLS:
            raise ValueError(
                f"'path' applies only to the file tools {', '.join(sorted(PATH_TOOLS))} "
                f"(this rule is for {tool})"
            )
        if not path or path.startswith("/"):
            raise ValueError(
                f"the path glob {path!r} must be relative to the workspace, e.g. 'src/**' "
                "or '**/*.lock'"
            )
        return path


class PolicySettings(_Strict):
    """What happens to each tool call: run it (allow), ask a person first (ask) or refuse it
    (deny). The first rule that matches decides; otherwise ``default`` does. A command holding
    shell syntax is always denied. A policy given in fabric.yaml replaces the pack's default
    policy as a whole."""

    default: Verdict = Field("allow", description="The verdict when no rule matches.")
    approval_timeout: float = Field(
        300.0,
        gt=0,
        description="Seconds an 'ask' waits for an answer (terminal or HTTP); then the call "
        "is denied.",
    )
    rules: list[PolicyRule] = Field([], description="Rules in order; the first that matches wins.")
