"""The engineering pack: reads, writes and searches code in the workspace and runs allowlisted
commands (tests, linters, git), then reports what it changed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fabric.application.pack import Pack
from fabric.config.policy import PolicyRule, PolicySettings
from fabric.config.schema import PackSettings, SandboxSettings, VerifySettings
from fabric.infrastructure.tools.briefs import WorkspaceBrief
from fabric.infrastructure.tools.function_tool import json_schema_of
from fabric.infrastructure.tools.library import library_tools
from fabric.infrastructure.tools.verifiers import SeenFigures

SYSTEM_PROMPT = """\
You are a careful software engineer working in one project folder, the workspace. Every path
is relative to the workspace root: a file at the root is just its name, never /workspace/...

Below the task, fabric lists the workspace's files and says how its tests fare right now.
Use only paths from that list (or from list_files); a new file gets the name the task gives
it. Work in small, checked steps:
1. If tests fail, start from the failure: it names the file, the line and what was wrong.
2. Find the code: search_files, then read_file (it shows line numbers).
3. Change an existing file with edit_file: copy the exact lines to replace into `old`
   (without the line numbers) and put the new lines in `new`. Change only what the task
   needs, in the source code. Use write_file only to create a new file.
4. Run the tests again. If something fails, read the error, fix the code, run them again.
5. Call finish_task with a short summary and the files you changed. For a question about
   the code, put the answer in the summary.

shell runs one allowed program with its arguments; there is no shell syntax (no pipes, ';',
'&&' or redirections). Do not change or delete tests unless the task asks for it. After
finish_task, fabric runs the project's tests itself: if they fail you are told why, and you
must fix the code. Never claim a check passed unless you ran it."""


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
    artifacts: list[str] = Field([], description="Workspace paths of files created or changed.")
    next_steps: list[str] = Field([], description="What a person should do or check next.")
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
    verify: VerifySettings = Field(
        default_factory=lambda: VerifySettings(command="auto", when="always"),
        description="How the work is checked before a run ends completed; by default the "
        "project's pytest tests after every finish_task, when the workspace has any (a model "
        "that claims a fix it never made is caught too).",
    )
    brief: bool = Field(
        True,
        description="Before the first step, tell the model the workspace's files and how its "
        "tests fare (one confined pytest run, at most 60 s); small models need it most.",
    )
    write_replaces_files: bool = Field(
        False,
        description="Whether write_file may replace an existing file. Off: it only creates "
        "files, and an existing one is changed with edit_file (small models write one line "
        "over a whole file and lose the rest).",
    )
    keep_failing_tests: bool = Field(
        True,
        description="When the brief finds failing tests, edit_file and write_file leave those "
        "test files as they are for the run and say to change the code they test (small "
        "models otherwise weaken the test). Turn off for tasks that must change a failing "
        "test; commands are not bound by it.",
    )
    system_prompt: str = Field(SYSTEM_PROMPT, description="Replaces the built-in prompt.")


def build(settings: EngineeringSettings) -> Pack:
    return Pack(
        name="engineering",
        description=settings.description,
        system_prompt=settings.system_prompt,
        tools=library_tools(
            "read_file",
            "edit_file",
            "write_file",
            "list_files",
            "search_files",
            "shell",
            bind={"replace_files": settings.write_replaces_files},
        ),
        finish_schema=json_schema_of(EngineeringResult),
        finish_model=EngineeringResult,
        finish_description="Finish the task: report the summary, the files changed (artifacts), "
        "next steps and notes.",
        sandbox=settings.sandbox,
        # the project's tests (verify.command) are added by the registry; this one holds the
        # summary's numbers to what the run saw (an answer to a question is made up otherwise)
        verifiers=(SeenFigures("summary"),),
        brief=WorkspaceBrief(keep_failing_tests=settings.keep_failing_tests)
        if settings.brief
        else None,
    )
