"""Every error fabric raises on purpose.

    FabricError                      base: ``message`` says what happened, ``hint`` what to do next
    ├── ConfigError                  fabric.yaml or a CLI option is wrong (exit code 2)
    │   └── PackError                a pack cannot be found, imported or built
    ├── TelemetryError               traces could not be exported (fabric export otel, exit 1)
    └── RunError                     something went wrong while a task ran (exit code 1)
        ├── ModelError               a model backend failed; carries status code and body
        │   ├── ModelConnectionError     network: the server cannot be reached      [retryable]
        │   │   └── ModelTimeoutError    timeout: no answer in time                 [retryable]
        │   ├── ModelAuthError           authentication: credentials refused
        │   ├── ModelRateLimitError      rate_limited: 429, may say when to retry   [retryable]
        │   ├── ModelServerError         server_error: 5xx                          [retryable]
        │   ├── ModelNotFoundError       model_not_found
        │   ├── ModelCapabilityError     the model cannot do what the run needs
        │   │   ├── ModelToolsUnsupportedError   tools_unsupported
        │   │   └── ModelContextLengthError      context_length_exceeded
        │   └── ModelResponseError       invalid_response: an answer fabric cannot use
        ├── RecordedRunError         a failure a runlog or a recorded step kept, raised again
        ├── BudgetSpent              budget_exceeded: a limit of limits.budget was reached
                                     (in application/budget.py)
        └── ToolError                raised inside a tool; the loop turns it into a tool result
            ├── RecordedToolError        a tool's failure kept the same way (both: ``Recorded``)
            ├── ToolArgumentError        arguments failed validation
            ├── McpError                 an MCP server did not start, answer or stay up
            └── SandboxError             the sandbox refused (path outside workspace, command
                                         not allowed, address not allowed)

Model errors have short stable codes (``network``, ``rate_limited``, ...) for runlogs and JSON
output; the others derive theirs from the class name (``config_error``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class FabricError(Exception):
    """Base class: a message a user can read plus what to do about it."""

    CODE: ClassVar[str | None] = None
    """A fixed code; None derives one from the class name."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message

    def as_dict(self) -> dict[str, str]:
        """The error as runlogs, task records and JSON output show it: code, message, and the
        hint when there is one."""
        out = {"code": self.code, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        return out

    @property
    def code(self) -> str:
        """A short stable identifier, e.g. ``config_error``, for JSON output and runlogs."""
        if self.CODE:
            return self.CODE
        name = type(self).__name__.removesuffix("Error") or "Fabric"
        return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_") + "_error"


class ConfigError(FabricError):
    """The configuration or the command line is wrong; nothing ran."""


class PackError(ConfigError):
    """A pack cannot be resolved, imported or built."""


class TelemetryError(FabricError):
    """Spans could not be delivered to where they were to go (``fabric export otel``). Live
    runs never raise it: their traces are best effort."""


class RunError(FabricError):
    """A task started but something stopped it."""


class ModelError(RunError):
    """A model backend failed. ``status_code`` and ``body`` are kept when there was a reply;
    ``retryable`` says whether trying again may help, ``retry_after`` how long the server asked
    to wait (seconds)."""

    CODE = "model_error"
    RETRYABLE: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        status_code: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.RETRYABLE


class ModelConnectionError(ModelError):
    """The model server could not be reached."""

    CODE = "network"
    RETRYABLE = True


class ModelTimeoutError(ModelConnectionError):
    """The model server did not answer in time."""

    CODE = "timeout"


class ModelAuthError(ModelError):
    """The model server refused the credentials."""

    CODE = "authentication"


class ModelRateLimitError(ModelError):
    """The server is rate limiting (429); ``retry_after`` may say for how long."""

    CODE = "rate_limited"
    RETRYABLE = True


class ModelServerError(ModelError):
    """The server failed on its side (5xx)."""

    CODE = "server_error"
    RETRYABLE = True


class ModelNotFoundError(ModelError):
    """The server does not know the model (or the URL is not a chat endpoint)."""

    CODE = "model_not_found"


class ModelCapabilityError(ModelError):
    """The model cannot do what the run needs."""

    CODE = "capability"


class ModelToolsUnsupportedError(ModelCapabilityError):
    """The model does not support tool calls."""

    CODE = "tools_unsupported"


class ModelContextLengthError(ModelCapabilityError):
    """The conversation no longer fits the model's context window."""

    CODE = "context_length_exceeded"


class ModelResponseError(ModelError):
    """The server answered, but not with something fabric can use."""

    CODE = "invalid_response"


class ToolError(RunError):
    """A tool failed; the loop reports it to the model as the tool's result."""


class Recorded(FabricError):
    """An error as a runlog or a recorded step kept it (``as_dict``), raised again: the same
    code, message and hint (a replay, a durable run driven again)."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        super().__init__(str(error.get("message", "")), hint=str(error.get("hint", "")))
        self._recorded_code = str(error.get("code") or "")

    DEFAULT_CODE: ClassVar[str] = "run_error"
    """The code when the record has none."""

    @property
    def code(self) -> str:
        return self._recorded_code or self.DEFAULT_CODE


class RecordedRunError(Recorded, RunError):
    """A recorded failure of a run (a model call, a check)."""


class RecordedToolError(Recorded, ToolError):
    """A recorded failure of a tool: the loop reports it to the model, as it did then."""

    DEFAULT_CODE = "tool_error"


class ToolArgumentError(ToolError):
    """The model called a tool with arguments that do not match its schema."""


class SandboxError(ToolError):
    """The sandbox refused the call (path, command or address not allowed)."""


class McpError(ToolError):
    """An MCP server did not start, did not answer in time, crashed, or answered with
    something fabric cannot use."""

    CODE = "mcp_error"
