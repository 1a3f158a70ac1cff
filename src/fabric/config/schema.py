"""The typed shape of ``fabric.yaml``. YAML is parsed once, at the edge, into these models."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator, model_validator

from fabric.domain.secrets import looks_secret

from .policy import PolicySettings


class _Strict(BaseModel):
    # defer_build: validators are built on first use, not at import (~25 ms off every start)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Timeouts(_Strict):
    """How long to wait for the model server, in seconds."""

    connect: float = Field(10.0, gt=0, description="Opening a connection.")
    read: float = Field(
        600.0,
        gt=0,
        description="Each wait for the next bytes of a reply (local models are slow to start); "
        "``request`` bounds the whole reply.",
    )
    write: float = Field(60.0, gt=0, description="Sending a request.")
    request: float = Field(
        900.0,
        gt=0,
        description="One whole model request, a streamed reply read to its last byte included. "
        "read bounds each wait for data only, so a server that keeps sending a little never "
        "trips it; this does (then the request is retried like any timeout). Slow CPU models "
        "writing long replies may need more.",
    )


class RetrySettings(_Strict):
    """Retries of a model call that failed in a way that may pass: rate limits (429), server
    errors (5xx), connection failures and timeouts. Never on 400, 401, 403 or 404."""

    attempts: int = Field(4, ge=1, le=20, description="Tries in all, the first included.")
    initial_delay: float = Field(
        0.5, ge=0, description="Seconds before the first retry; doubles each time, with jitter."
    )
    max_delay: float = Field(30.0, ge=0, description="Longest wait between two tries.")
    total_time: float = Field(
        180.0, gt=0, description="Give up when the next wait would pass this many seconds."
    )


FallbackTrigger = Literal["capability", "retries_exhausted"]


class FallbackStep(_Strict):
    """A model to switch to when the current one fails in one of the ways listed in ``on``."""

    backend: str = Field(description="A name under llm.backends.")
    model: str = Field(description="A model name that backend knows.")
    on: list[FallbackTrigger] = Field(
        default_factory=lambda: list[FallbackTrigger](["capability"]),
        description="'capability': the model cannot do what the run needs (tools, context "
        "length); 'retries_exhausted': it kept failing after all retries.",
    )


class ModelOptions(_Strict):
    """Settings for one model, by its name."""

    text_tool_calls: bool = Field(
        False,
        description="Parse tool calls the model writes as JSON in its text (bare, fenced or in "
        "<tool_call> tags). For small local models; off unless set, and every use is logged.",
    )
    constrained_tool_calls: bool = Field(
        False,
        description="llama.cpp servers only: constrain every reply to one tool call, as JSON "
        "matching the offered tools' schemas (llama.cpp's json_schema), and read it as that "
        "call. Lets a small model that writes calls badly use tools reliably; it can then "
        "never answer in plain text. Off unless set; logged like text_tool_calls.",
    )
    num_ctx: int | None = Field(
        None,
        ge=256,
        description="Context window to ask Ollama for (default: the model's own, up to 32768).",
    )
    temperature: float | None = Field(
        None,
        ge=0,
        le=2,
        description="Sampling temperature for this model; replaces llm.temperature (a small "
        "model calls tools more reliably when it samples less). Unset: llm.temperature.",
    )
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="Most tokens one reply may have (OpenAI-compatible servers, the embedded "
        "model, Ollama's num_predict; Anthropic backends have their own max_tokens). Bounds "
        "how long one step can take on a slow machine. Unset: the server's default.",
    )
    input_price: float | None = Field(
        None, ge=0, description="US dollars per million prompt tokens, for the run's cost."
    )
    output_price: float | None = Field(
        None, ge=0, description="US dollars per million completion tokens."
    )


class SelectionSettings(_Strict):
    """How fabric picks a model when the configured one is not there."""

    max_params_b: float | None = Field(
        16.0,
        gt=0,
        description="Largest model (billions of parameters) to pick on its own; larger ones "
        "are used only when named. Unset: no limit.",
    )
    probe_tools: bool = Field(
        False,
        description="Before using a model whose tool support is unknown, send one tiny "
        "tool-call request to check it (the answer is cached).",
    )


class _Backend(_Strict):
    models: dict[str, str] = Field(
        default_factory=dict,
        description="Model keys mapped to this backend's model names; overrides llm.models.",
    )

    @field_validator("base_url", mode="after", check_fields=False)
    @classmethod
    def _no_credentials(cls, url: HttpUrl | None) -> HttpUrl | None:
        if url is not None and (url.username or url.password):
            raise ValueError(
                "a base_url must not hold credentials (user:password@); they would end up in "
                "logs and error messages. Put the key in an environment variable named in "
                "api_key_env"
            )
        return url


class OpenAIBackend(_Backend):
    """Any OpenAI-compatible server: vLLM, llama.cpp server, LM Studio, OpenAI, OpenRouter."""

    kind: Literal["openai"]
    base_url: HttpUrl = Field(
        HttpUrl("http://127.0.0.1:8080/v1"),
        description="Base URL up to and including /v1. FABRIC_BASE_URL overrides it.",
    )
    api_key_env: list[str] = Field(
        default_factory=lambda: ["FABRIC_API_KEY", "OPENAI_API_KEY"],
        description="Environment variables holding the API key, first set wins. Keys are "
        "never written in this file.",
    )
    stream: bool = Field(True, description="Stream replies (shown live by `fabric run`).")


class OllamaBackend(_Backend):
    """A local Ollama server, through its native API (so num_ctx is honoured)."""

    kind: Literal["ollama"]
    base_url: HttpUrl | None = Field(
        None,
        description="Unset: taken from OLLAMA_HOST like Ollama's own clients, else "
        "http://127.0.0.1:11434.",
    )
    ensure_available: bool = Field(
        True, description="Start `ollama serve` when the server is not running."
    )
    stream: bool = Field(True, description="Stream replies (shown live by `fabric run`).")


class AnthropicBackend(_Backend):
    """Anthropic's Messages API (a cloud model: used only when configured)."""

    kind: Literal["anthropic"]
    base_url: HttpUrl = Field(HttpUrl("https://api.anthropic.com"), description="API base URL.")
    api_key_env: list[str] = Field(
        default_factory=lambda: ["ANTHROPIC_API_KEY"],
        description="Environment variables holding the API key, first set wins.",
    )
    max_tokens: int = Field(4096, ge=1, description="Most tokens one reply may have.")
    stream: bool = Field(True, description="Stream replies (shown live by `fabric run`).")


class EmbeddedBackend(_Backend):
    """llama.cpp run by fabric (pip install 'agent-fabric[local]') on loopback: one server
    per model file and settings, shared by every run and task of this user on the machine,
    started on demand and stopped when idle. Needs no model server."""

    kind: Literal["embedded"]
    model_path: str | None = Field(
        None,
        description="A GGUF file to serve. Unset: the small model packaged for fabric "
        "(Qwen2.5-Coder-0.5B-Instruct), or FABRIC_GGUF.",
    )
    context_size: int = Field(8192, ge=512, description="Context window in tokens.")
    threads: int | None = Field(None, ge=1, description="CPU threads; unset: all cores.")
    startup_timeout: float = Field(120.0, gt=0, description="Seconds to wait for it to load.")
    idle_timeout: float = Field(
        300.0,
        ge=0,
        description="Seconds the shared server stays up once no fabric process uses it; "
        "then it stops and frees its memory (the next run starts it again).",
    )


Backend = Annotated[
    OpenAIBackend | OllamaBackend | AnthropicBackend | EmbeddedBackend,
    Field(discriminator="kind"),
]


def _default_backends() -> dict[str, Backend]:
    return {
        "ollama": OllamaBackend(kind="ollama"),
        "openai": OpenAIBackend(kind="openai"),
        "anthropic": AnthropicBackend(kind="anthropic"),
        "embedded": EmbeddedBackend(kind="embedded"),
    }


class LLMSettings(_Strict):
    """Model backends and how fabric picks one."""

    backend: str = Field(
        "auto",
        description="The backend to use: a name under llm.backends, or 'auto' (the first of "
        "llm.auto that is running and has a usable model). --backend and FABRIC_BACKEND "
        "override it.",
    )
    auto: list[str] = Field(
        default_factory=lambda: ["ollama", "embedded"],
        description="Backends 'auto' tries, in order. Local ones only, by design.",
    )
    backends: dict[str, Backend] = Field(
        default_factory=_default_backends,
        description="Backends by name. Entries given here replace the built-in ones of the "
        "same name (ollama, openai, anthropic, embedded); the others stay.",
    )
    models: dict[str, str] = Field(
        default_factory=lambda: {"default": "qwen2.5-coder:7b"},
        description="Model keys (used by packs) mapped to model names, for every backend "
        "(a backend's own models table wins). A key no table names, or the name 'auto', "
        "lets fabric pick the best tool-capable model. FABRIC_MODEL overrides every key.",
    )
    model_options: dict[str, ModelOptions] = Field(
        default_factory=dict, description="Per-model settings, by model name."
    )
    selection: SelectionSettings = Field(
        default_factory=SelectionSettings, description="How a model is picked."
    )
    retry: RetrySettings = Field(default_factory=RetrySettings, description="Retries.")
    fallback: list[FallbackStep] = Field(
        default_factory=list,
        description="Models to switch to, in order, when the current one fails as listed in "
        "each step's 'on'. Every switch is recorded in the runlog.",
    )
    timeouts: Timeouts = Field(default_factory=Timeouts, description="Request timeouts.")
    temperature: float | None = Field(
        None, ge=0, le=2, description="Sampling temperature; unset leaves the server default."
    )

    @property
    def api_key_names(self) -> tuple[str, ...]:
        """The environment variables the backends read API keys from (their ``api_key_env``),
        whatever they are called: their values are secrets fabric never writes out."""
        return tuple(
            name
            for backend in self.backends.values()
            if isinstance(backend, OpenAIBackend | AnthropicBackend)
            for name in backend.api_key_env
        )

    @field_validator("backends", mode="before")
    @classmethod
    def _over_builtins(cls, given: Any) -> Any:
        if not isinstance(given, dict):
            return given
        return {**_default_backends(), **given}

    @model_validator(mode="after")
    def _names_exist(self) -> LLMSettings:
        known = set(self.backends)
        for name in [*self.auto, *(f.backend for f in self.fallback)]:
            if name not in known:
                raise ValueError(
                    f"backend {name!r} is not under llm.backends (known: {', '.join(known)})"
                )
        if self.backend != "auto" and self.backend not in known:
            raise ValueError(
                f"llm.backend {self.backend!r} is not 'auto' nor a name under llm.backends "
                f"({', '.join(known)})"
            )
        return self


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
        default_factory=list,
        description="Programs the shell tool may start, by bare name (e.g. 'python', 'git').",
    )
    network: bool = Field(False, description="Whether tools may use the network.")
    allow_private_addresses: bool = Field(
        False,
        description="Whether fetch_url may reach loopback, private and link-local addresses.",
    )
    command_timeout: float = Field(60.0, gt=0, description="Seconds a shell command may run.")
    env_passthrough: list[str] = Field(
        default_factory=list,
        description="Extra environment variables passed to commands. Names that look like "
        "secrets (KEY, TOKEN, SECRET, PASSWORD, AUTH, CREDENTIAL, COOKIE) are refused.",
    )
    policy: PolicySettings = Field(
        default_factory=PolicySettings,
        description="Which tool calls run, which wait for a person's approval and which are "
        "refused: a default verdict and rules matched first to last (see "
        "fabric/config/policy.py).",
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


class Limits(_Strict):
    """Bounds on one run."""

    max_steps: int = Field(30, ge=1, description="Model calls at most.")
    finish_repairs: int = Field(
        2,
        ge=0,
        description="Extra chances after a finish_task is refused: its arguments fail "
        "validation, or the work fails the pack's verification (one budget for both).",
    )
    tool_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds one tool call may take before the model is told it timed out "
        "(caps shell's command_timeout too).",
    )
    tool_output_chars: int = Field(
        16_000,
        ge=256,
        description="Tool output longer than this is cut for the model; the full text is kept "
        "as an artifact beside the runlog.",
    )


class VerifySettings(_Strict):
    """How a pack checks the work before a run may end ``completed``."""

    command: str | None = Field(
        None,
        description="Run in the workspace (confined like the pack's commands) after a valid "
        "finish_task; exit code 0 passes, anything else goes back to the model as a failed "
        "finish (a repair round), and the run ends 'unverified' when the rounds run out. "
        "'auto': the project's pytest tests, when the workspace has any. Unset: no command.",
    )
    when: Literal["changed", "always"] = Field(
        "changed",
        description="changed: only for runs that did more than read (wrote a file, ran a "
        "command); always: after every finish_task.",
    )
    timeout: float | None = Field(
        None, gt=0, description="Seconds the command may take (default: sandbox.command_timeout)."
    )


class PackSettings(BaseModel):
    """The part of a pack's YAML section fabric itself reads. A builder's own settings model
    subclasses this and adds its keys; unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    builder: str = Field(
        description="Where the pack is built: 'module:callable', or a built-in short name."
    )
    description: str = Field("", description="One line shown by `fabric packs`.")
    model: str = Field("default", description="Key into llm.models.")
    limits: Limits = Field(default_factory=Limits, description="Bounds on each run.")
    sandbox: SandboxSettings = Field(
        default_factory=SandboxSettings, description="What the pack's tools may touch."
    )
    verify: VerifySettings = Field(
        default_factory=VerifySettings,
        description="How the work is checked before a run ends completed (per task: "
        "--verify / --no-verify, or the task's verify field).",
    )


class RawPackSection(PackSettings):
    """A pack section before its builder's own model has checked the extra keys."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ServeSettings(_Strict):
    """The HTTP task service (`fabric serve`)."""

    host: str = Field("127.0.0.1", description="Address to bind; loopback unless you need more.")
    port: int = Field(8321, ge=0, le=65535, description="Port to bind (0: any free port).")
    token_env: str = Field(
        "FABRIC_API_TOKEN",
        description="Environment variable holding the bearer token. Unset: fabric generates "
        "one and keeps it owner-only in token_file.",
    )
    token_file: str = Field(
        "~/.config/fabric/api-token", description="Where a generated token is kept."
    )
    allowed_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "localhost", "::1"],
        description="Host header values accepted (blocks DNS rebinding); the bound address "
        "is added.",
    )
    cors_origins: list[str] = Field(
        default_factory=list, description="Browser origins allowed to call the API (none)."
    )
    max_body_bytes: int = Field(1_000_000, ge=1024, description="Largest request body accepted.")
    workspace_roots: list[str] = Field(
        default_factory=lambda: ["."],
        min_length=1,
        description="Folders a task's workspace must lie under (relative to the config "
        "file's folder). The first is the default workspace.",
    )
    max_task_chars: int = Field(100_000, ge=1, description="Longest task text accepted.")
    share_workspaces: bool = Field(
        False,
        description="Let tasks on the same workspace run at the same time. Off: a task whose "
        "workspace is, contains or lies inside a running or earlier waiting task's workspace "
        "stays queued until that one ends, so two runs never edit the same files at once.",
    )
    concurrency: int = Field(4, ge=1, description="Tasks running at once, in all.")
    pack_concurrency: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="Tasks of one pack running at once, by pack name."
    )
    shutdown_grace: float = Field(
        20.0, ge=0, description="Seconds running tasks get to finish on shutdown."
    )
    database: str = Field(
        "tasks.sqlite3", description="The task records (relative to the config's folder)."
    )


class FabricConfig(_Strict):
    """The whole of ``fabric.yaml``."""

    version: Literal[1] = Field(1, description="Format version of this file.")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="The model backend.")
    runs_dir: str = Field(
        "runs",
        description="Where runlogs go; relative paths are taken from the config file's folder.",
    )
    default_pack: str | None = Field(None, description="Pack used when --pack is not given.")
    serve: ServeSettings = Field(default_factory=ServeSettings, description="fabric serve.")
    packs: dict[str, RawPackSection] = Field(default_factory=dict, description="Packs by name.")
