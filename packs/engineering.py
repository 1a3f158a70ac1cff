"""The engineering pack: reads, writes and searches code in the workspace and runs allowlisted
commands (tests, linters, git), then reports what it changed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fabric.application.pack import Pack
from fabric.config.policy import PolicyRule, PolicySettings
from fabric.config.schema import PackSettings, SandboxSettings
from fabric.infrastructure.tools.function_tool import json_schema_of
from fabric.infrastructure.tools.library import library_tools

SYSTEM_PROMPT = """\
You are a careful software engineer working inside one project folder (the workspace).
Work in small verified steps: look before you change (list_files, search_files, read_file),
make the change with write_file, then check it by running the project's tests or the program
with shell. Paths are relative to the workspace root. shell runs one allowed program with its
arguments; there is no shell syntax (no pipes, ';', '&&' or redirections).
When the task is done, or cannot be done, call finish_task with a short summary, the files you
created or changed, and any next steps. Never claim a check passed unless you ran it."""


DEFAULT_POLICY = PolicySettings(
    rules=[
        # git -c / --config-env set config for one command: core.pager, core.sshCommand or an
        # alias would run any program, past the allowlist
        PolicyRule(tool="shell", command="git ** -c* **", verdict="deny"),
        PolicyRule(tool="shell", command="git ** --config-env* **", verdict="deny"),
        # publishing leaves the machine: a person says yes first
        PolicyRule(tool="shell", command="git ** push **", verdict="ask"),
    ]
)
"""What the engineering pack asks about or refuses unless fabric.yaml sets its own policy."""


class EngineeringResult(BaseModel):
    """What the engineering pack reports at the end of a task."""

    model_config = ConfigDict(extra="forbid")

    summary: str = Field(description="What was done and how it was checked, in a few sentences.")
    artifacts: list[str] = Field(
        default_factory=list, description="Workspace paths of files created or changed."
    )
    next_steps: list[str] = Field(
        default_factory=list, description="What a person should do or check next."
    )
    notes: str = Field("", description="Anything else worth knowing: caveats, open questions.")


class EngineeringSettings(PackSettings):
    """Settings of the engineering pack."""

    description: str = Field(
        "Reads, changes and tests code in the workspace.",
        description="One line shown by `fabric packs`.",
    )
    sandbox: SandboxSettings = Field(
        default_factory=lambda: SandboxSettings(
            allowed_commands=["python", "python3", "pytest", "ls", "cat", "grep", "git"],
            network=False,
            policy=DEFAULT_POLICY,
        ),
        description="What the pack's tools may touch.",
    )
    system_prompt: str = Field(SYSTEM_PROMPT, description="Replaces the built-in prompt.")


def build(settings: EngineeringSettings) -> Pack:
    return Pack(
        name="engineering",
        description=settings.description,
        system_prompt=settings.system_prompt,
        tools=library_tools("read_file", "write_file", "list_files", "search_files", "shell"),
        finish_schema=json_schema_of(EngineeringResult),
        finish_model=EngineeringResult,
        finish_description="Finish the task: report the summary, the files changed (artifacts), "
        "next steps and notes.",
        sandbox=settings.sandbox,
    )
