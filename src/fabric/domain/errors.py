"""Every error fabric raises on purpose.

    FabricError                      base: ``message`` says what happened, ``hint`` what to do next
    ├── ConfigError                  fabric.yaml or a CLI option is wrong (exit code 2)
    │   └── PackError                a pack cannot be found, imported or built
    └── RunError                     something went wrong while a task ran (exit code 1)
        ├── ModelError               the model server failed; carries status code and body
        │   ├── ModelConnectionError     server unreachable or timed out
        │   ├── ModelAuthError           401/403
        │   ├── ModelNotFoundError       404 / unknown model
        │   ├── ModelCapabilityError     the model cannot do what the pack needs (tools)
        │   └── ModelResponseError       the server answered with something unusable
        └── ToolError                raised inside a tool; the loop turns it into a tool result
            ├── ToolArgumentError        arguments failed validation
            └── SandboxError             the sandbox refused (path outside workspace, command
                                         not allowed, address not allowed)

Control-flow signals (not errors a user sees) live in ``application.signals``.
"""

from __future__ import annotations


class FabricError(Exception):
    """Base class: a message a user can read plus what to do about it."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message

    @property
    def code(self) -> str:
        """A short stable identifier, e.g. ``config_error``, for JSON output and runlogs."""
        name = type(self).__name__.removesuffix("Error") or "Fabric"
        return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_") + "_error"


class ConfigError(FabricError):
    """The configuration or the command line is wrong; nothing ran."""


class PackError(ConfigError):
    """A pack cannot be resolved, imported or built."""


class RunError(FabricError):
    """A task started but something stopped it."""


class ModelError(RunError):
    """The model server failed. ``status_code`` and ``body`` are kept when there was a reply."""

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        status_code: int | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.status_code = status_code
        self.body = body


class ModelConnectionError(ModelError):
    """The model server could not be reached or did not answer in time."""


class ModelAuthError(ModelError):
    """The model server refused the credentials."""


class ModelNotFoundError(ModelError):
    """The server does not know the model (or the URL is not a chat endpoint)."""


class ModelCapabilityError(ModelError):
    """The model cannot do what the run needs, e.g. it does not support tool calls."""


class ModelResponseError(ModelError):
    """The server answered, but not with a chat completion fabric can use."""


class ToolError(RunError):
    """A tool failed; the loop reports it to the model as the tool's result."""


class ToolArgumentError(ToolError):
    """The model called a tool with arguments that do not match its schema."""


class SandboxError(ToolError):
    """The sandbox refused the call (path, command or address not allowed)."""
