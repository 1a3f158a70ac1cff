"""``llm:``: the backends, models, timeouts, retries and fallback a run's model comes from."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, HttpUrl, field_validator, model_validator

from .base import _Strict


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
    context_size: int | None = Field(
        None,
        ge=512,
        description="The model's context window in tokens, where its server does not say (or "
        "says more than it serves): runs keep their requests inside it (older tool outputs "
        "elided) and fail clearly when one would not fit.",
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
        {},
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
        {}, description="Per-model settings, by model name."
    )
    selection: SelectionSettings = Field(
        default_factory=SelectionSettings, description="How a model is picked."
    )
    retry: RetrySettings = Field(default_factory=RetrySettings, description="Retries.")
    fallback: list[FallbackStep] = Field(
        [],
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
