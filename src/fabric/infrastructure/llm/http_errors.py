"""HTTP failures of any model backend, mapped once to fabric's model errors.

Every adapter (OpenAI-compatible, Ollama, Anthropic) sends its httpx exceptions and error
replies through here, so a user sees the same codes and the same advice whatever the server.
A reply that echoes the API key (some servers quote the ``Authorization`` header they got)
loses it here, before the error goes anywhere: known secrets in any of their forms
(``fabric.domain.secrets``) and any ``Bearer <token>`` become ``[redacted]``.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import re
import time
from collections.abc import Mapping
from typing import Any

import httpx

from fabric.domain.errors import (
    ModelAuthError,
    ModelConnectionError,
    ModelContextLengthError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
    ModelToolsUnsupportedError,
)
from fabric.domain.secrets import REDACTED, Secrets

BODY_LIMIT = 2000
# A bearer token the server quoted back, even one fabric does not know: 8+ characters with a
# digit, or 24+ ("Bearer authentication failed" keeps its words).
_BEARER = re.compile(
    r"(\bbearer\s+)(?:(?=[^\s\"'\\,;]*\d)[^\s\"'\\,;]{8,}|[^\s\"'\\,;]{24,})", re.IGNORECASE
)
_TOOLS_UNSUPPORTED = (
    "does not support tools",
    "tool use is not supported",
    "tools are not supported",
    "does not support function calling",
    # vLLM started without --enable-auto-tool-choice; the body is JSON, so the quotes around
    # "auto" arrive escaped: match the words after them.
    "tool choice requires --enable-auto-tool-choice",
    "tools param requires --jinja",  # llama-server started without --jinja
    "no endpoints found that support tool use",  # OpenRouter (a 404)
)
_TOOLS_FIX = {
    "--enable-auto-tool-choice": "start vLLM with --enable-auto-tool-choice --tool-call-parser "
    "<the model's parser> (e.g. hermes for Qwen2.5), or pick",
    "--jinja": "start llama-server with --jinja (tool calls need the model's chat template), "
    "or pick",
}
_CONTEXT_EXCEEDED = (
    "context length",
    "context_length",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "exceeds the context",
    "context window",
    "maximum model length",  # vLLM: "... is longer than the maximum model length of N"
    "available context size",  # llama.cpp: "the request exceeds the available context size"
    "exceed_context_size",  # llama.cpp's error type
)
_MODEL_MISSING = (
    "model not found",
    "model_not_found",  # OpenAI's and LM Studio's error code
    "no such model",
    "does not exist",
    "not found, try pulling",
    "no models loaded",  # LM Studio with nothing loaded
)


def transport_error(exc: httpx.HTTPError, url: str) -> ModelError:
    """A request that got no HTTP answer: timeout or connection failure."""
    if isinstance(exc, httpx.TimeoutException):
        return ModelTimeoutError(
            f"the model server at {url} did not answer in time ({type(exc).__name__})",
            hint="raise llm.timeouts in fabric.yaml, or use a smaller or faster model",
        )
    return ModelConnectionError(
        f"cannot reach the model server at {url}: {exc or type(exc).__name__}",
        hint="start the server (for Ollama: `ollama serve`), or pick another backend with "
        "--backend or FABRIC_BACKEND, or point its base_url at a running server",
    )


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), if any."""
    value = headers.get("retry-after") or headers.get("Retry-After")
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:  # "nan" and "inf" parse as floats but are no delay
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def status_error(
    status: int,
    body: str,
    headers: Mapping[str, str],
    *,
    model: str,
    server: str,
    secrets: Secrets | None = None,
) -> ModelError:
    """An HTTP error reply mapped to the fabric error a user can act on. ``secrets`` (default:
    the secret-looking environment variables, which include the usual API key variables; an
    adapter passes ``key_secrets(its key)``) are redacted from the body and the message,
    before the body is cut short."""
    known = key_secrets(None) if secrets is None else secrets
    body = _scrub(body, known)
    text = body[:BODY_LIMIT]
    reason = _scrub(_reason(body), known)  # the JSON decoded may spell a key with escapes
    lowered = f"{text}\n{reason}".lower()
    what = f"{server} answered {status} for model {model!r}: {reason[:500]}"
    kwargs: dict[str, Any] = {"status_code": status, "body": text}
    if status in (401, 403):
        return ModelAuthError(
            what,
            hint="set the API key variable named in the backend's api_key_env (e.g. "
            "FABRIC_API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY) to a valid key",
            **kwargs,
        )
    if status == 429:
        return ModelRateLimitError(
            what,
            hint="the server is rate limiting or out of quota; wait and try again, or check "
            "your plan with the provider",
            retry_after=retry_after(headers),
            **kwargs,
        )
    if status == 402:
        return ModelError(
            what,
            hint="the account behind the API key is out of credits: add credits with the "
            "provider, or pick another backend with --backend",
            **kwargs,
        )
    if status == 408:
        return ModelTimeoutError(
            what,
            hint="the server gave up waiting; try again, or raise llm.timeouts in fabric.yaml",
            **kwargs,
        )
    if any(s in lowered for s in _TOOLS_UNSUPPORTED):
        fix = next((f for flag, f in _TOOLS_FIX.items() if flag in lowered), "pick")
        return ModelToolsUnsupportedError(
            f"model {model!r} cannot call tools: {reason[:300]}",
            hint=fix + " a tool-capable model (e.g. qwen2.5-coder, llama3.1, mistral-nemo) "
            "with --model or FABRIC_MODEL; `fabric models` shows which can",
            **kwargs,
        )
    if status in (400, 413) and any(s in lowered for s in _CONTEXT_EXCEEDED):
        return ModelContextLengthError(
            f"the conversation no longer fits model {model!r}'s context: {reason[:300]}",
            hint="use a model with a longer context (or raise num_ctx), or lower "
            "limits.tool_output_chars",
            **kwargs,
        )
    if status == 404 or any(s in lowered for s in _MODEL_MISSING):
        return ModelNotFoundError(
            what,
            hint=f"check the model name (for Ollama: `ollama pull {model}`), pick another with "
            "--model (`fabric models` lists them), and check the backend's base_url",
            **kwargs,
        )
    if status >= 500:
        return ModelServerError(
            what,
            hint="the server had a problem; try again, and check its logs",
            retry_after=retry_after(headers),
            **kwargs,
        )
    return ModelError(
        what, hint="check the request settings in fabric.yaml (model name, options)", **kwargs
    )


def key_secrets(api_key: str | None) -> Secrets:
    """What an adapter's errors never show: its own API key, whatever variable it was read
    from, and the values of the secret-looking environment variables."""
    return Secrets.from_env(os.environ, also=(api_key,) if api_key else ())


def _scrub(text: str, secrets: Secrets) -> str:
    return _BEARER.sub(rf"\1{REDACTED}", secrets.redact(text))


def _reason(body: str) -> str:
    """What the server said, from the usual JSON error shapes (``{"error": {"message"}}``,
    ``{"error": "..."}``, ``{"message"}``, ``{"detail"}``), else the body as it came."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body.strip()
    for holder in (data.get("error") if isinstance(data, dict) else None, data):
        if isinstance(holder, str) and holder.strip():
            return holder.strip()
        if isinstance(holder, dict):
            for key in ("message", "detail", "error"):
                if isinstance(holder.get(key), str) and holder[key].strip():
                    return str(holder[key]).strip()
    return body.strip()
