"""``sandbox:`` and ``web:`` of a pack: what its tools may touch, and its web tools."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, HttpUrl, field_validator

from fabric.config.policy import PolicySettings
from fabric.domain.secrets import looks_secret

from .base import _Strict


class ResourceLimits(_Strict):
    """Limits every command a tool starts runs under (whatever the confinement backend)."""

    cpu_seconds: int = Field(120, ge=1, description="CPU time of each process, in seconds.")
    memory_mb: int = Field(
        4096,
        ge=64,
        description="Memory of the whole command where a cgroup is available, and the "
        "address space of each process (MiB).",
    )
    file_size_mb: int = Field(1024, ge=1, description="Largest file a command may write (MiB).")
    open_files: int = Field(1024, ge=16, description="Open files per process.")
    processes: int = Field(
        256, ge=4, description="Processes and threads a command may have at once."
    )


class SandboxSettings(_Strict):
    """What a pack's tools may touch."""

    confinement: Literal["auto", "bwrap", "landlock", "none"] = Field(
        "auto",
        description="How commands are confined by the operating system: 'auto' picks "
        "bubblewrap, else Landlock + seccomp, and refuses to run commands when neither works; "
        "'none' runs them unconfined and must be chosen explicitly.",
    )
    resources: ResourceLimits = Field(
        default_factory=ResourceLimits, description="Resource limits of every command."
    )

    allowed_commands: list[str] = Field(
        [],
        description="Programs the shell tool may start, by bare name (e.g. 'python', 'git').",
    )
    network: bool = Field(False, description="Whether tools may use the network.")
    allow_private_addresses: bool = Field(
        False,
        description="Whether fetch_url may reach loopback, private and link-local addresses.",
    )
    command_timeout: float = Field(60.0, gt=0, description="Seconds a shell command may run.")
    env_passthrough: list[str] = Field(
        [],
        description="Extra environment variables passed to commands. Names that look like "
        "secrets (KEY, TOKEN, SECRET, PASSWORD, AUTH, CREDENTIAL, COOKIE) are refused.",
    )
    policy: PolicySettings = Field(
        default_factory=PolicySettings,
        description="Which tool calls run, which wait for a person's approval and which are "
        "refused: a default verdict and rules matched first to last (see "
        "fabric/config/policy.py).",
    )

    def within(self, outer: SandboxSettings) -> SandboxSettings:
        """These settings, never more than ``outer`` allows (a delegated run's, inside the
        run that delegated to it): the programs and variables both allow, the network only
        when both allow it, the lower of each limit, and confinement unless both run
        unconfined. The policy stays this one's; ``outer``'s is checked too (``PolicyGate``)."""
        lower = {
            name: min(getattr(self.resources, name), getattr(outer.resources, name))
            for name in type(self.resources).model_fields
        }
        return self.model_copy(
            update={
                "confinement": outer.confinement
                if self.confinement == "none"
                else self.confinement,
                "resources": ResourceLimits(**lower),
                "allowed_commands": [
                    c for c in self.allowed_commands if c in outer.allowed_commands
                ],
                "network": self.network and outer.network,
                "allow_private_addresses": self.allow_private_addresses
                and outer.allow_private_addresses,
                "command_timeout": min(self.command_timeout, outer.command_timeout),
                "env_passthrough": [n for n in self.env_passthrough if n in outer.env_passthrough],
            }
        )

    @field_validator("env_passthrough")
    @classmethod
    def _no_secrets(cls, names: list[str]) -> list[str]:
        secret = [n for n in names if looks_secret(n)]
        if secret:
            raise ValueError(
                f"{', '.join(secret)} look(s) like a secret; secrets are never passed to "
                "commands (remove the name from env_passthrough)"
            )
        return names


class WebSearchSettings(_Strict):
    """A search backend for the web_search tool."""

    kind: Literal["searxng"] = Field(
        "searxng", description="Backend protocol: a SearXNG instance's JSON API."
    )
    url: HttpUrl = Field(description="Base URL of the instance, e.g. http://127.0.0.1:8888.")
    max_results: int = Field(8, ge=1, le=50, description="Results returned at most.")


class WebSettings(_Strict):
    """Caps for fetch_url and the web_search backend."""

    max_bytes: int = Field(2_000_000, ge=1024, description="Largest response body read.")
    timeout: float = Field(20.0, gt=0, description="Seconds for one fetch, redirects included.")
    max_redirects: int = Field(5, ge=0, le=20, description="Redirects followed at most.")
    search: WebSearchSettings | None = Field(
        None, description="Where web_search sends queries; unset means web_search is off."
    )
