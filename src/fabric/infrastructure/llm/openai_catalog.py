"""What an OpenAI-compatible server offers: ``GET {base_url}/models``.

Every server answers ``{"data": [{"id": ...}, ...]}``; some say more, and what they say is used:

- OpenRouter: ``context_length``, ``supported_parameters`` (has ``"tools"`` when the model can
  call tools) and ``architecture.output_modalities``.
- vLLM: ``max_model_len`` (the context the server was started with).
- llama.cpp's server: ``meta.n_ctx`` (the context it runs with; older builds only have
  ``meta.n_ctx_train``, the model's trained context), ``meta.n_params``, ``meta.ftype``.
- LM Studio, OpenAI: the id only (tool support stays unknown).

A model whose id names embeddings (``text-embedding-3-small``, ``nomic-embed-text``) is
embedding-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from fabric.domain.errors import ModelResponseError
from fabric.domain.models import ModelInfo
from fabric.domain.secrets import Secrets

from .http import ClientPool, ModelHttp
from .http_errors import BODY_LIMIT, key_secrets, status_error, transport_error


class OpenAICatalog:
    """The models of one OpenAI-compatible backend."""

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        api_key: str | None,
        timeout: httpx.Timeout | float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        secrets: Secrets | None = None,
        pool: ClientPool | None = None,
    ) -> None:
        self._name = name
        self._base_url = base_url
        self._url = base_url.rstrip("/") + "/models"
        self._pool = pool
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._secrets = key_secrets(api_key) if secrets is None else secrets
        self._timeout = timeout
        self._transport = transport

    @property
    def backend(self) -> str:
        return self._name

    async def list_models(self) -> list[ModelInfo]:
        use = ModelHttp(
            self._base_url, timeout=self._timeout, headers=self._headers,
            transport=self._transport, pool=self._pool,
        )  # fmt: skip
        try:
            reply = await use.client.get(self._url)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self._url) from exc
        finally:
            await use.aclose()
        if reply.status_code == 404:
            raise ModelResponseError(
                f"backend {self._name!r} has no model list at {self._url} (404)",
                hint="check the backend's base_url: it should end in /v1 (e.g. "
                "http://127.0.0.1:8080/v1)",
                status_code=404,
                body=reply.text[:BODY_LIMIT],
            )
        if reply.status_code >= 400:
            raise status_error(
                reply.status_code,
                reply.text,
                reply.headers,
                model="(listing models)",
                server=f"backend {self._name!r} ({self._url})",
                secrets=self._secrets,
            )
        try:
            entries = reply.json()["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise self._odd_reply(reply) from exc
        if not isinstance(entries, list):
            raise self._odd_reply(reply)
        return [
            model_info(entry, self._name)
            for entry in entries
            if isinstance(entry, Mapping) and isinstance(entry.get("id"), str) and entry["id"]
        ]

    def _odd_reply(self, reply: httpx.Response) -> ModelResponseError:
        return ModelResponseError(
            f"backend {self._name!r} answered {self._url} without a model list "
            f"({{'data': [...]}}): {reply.text[:200]!r}",
            hint="check that the backend's base_url points at an OpenAI-compatible API "
            "(ending in /v1)",
            status_code=reply.status_code,
            body=reply.text[:BODY_LIMIT],
        )


def model_info(entry: Mapping[str, Any], backend: str) -> ModelInfo:
    """One ``data[]`` entry of a ``/models`` reply as a ``ModelInfo``."""
    name = str(entry["id"])
    meta = entry.get("meta")
    meta = meta if isinstance(meta, Mapping) else {}
    parameters = entry.get("supported_parameters")
    tools = ("tools" in parameters) if isinstance(parameters, list) else None
    context = _positive(entry.get("context_length")) or _positive(entry.get("max_model_len"))
    context = context or _positive(meta.get("n_ctx")) or _positive(meta.get("n_ctx_train"))
    n_params = _positive(meta.get("n_params"))
    quantization = meta.get("ftype")
    return ModelInfo(
        name=name,
        backend=backend,
        tools=tools,
        embedding_only=_embedding_only(name, entry),
        context_length=context,
        parameters_b=round(n_params / 1e9, 2) if n_params else None,
        quantization=quantization if isinstance(quantization, str) and quantization else None,
    )


def _embedding_only(name: str, entry: Mapping[str, Any]) -> bool:
    if "embed" in name.lower():
        return True
    architecture = entry.get("architecture")
    outputs = architecture.get("output_modalities") if isinstance(architecture, Mapping) else None
    return isinstance(outputs, list) and "embeddings" in outputs and "text" not in outputs


def _positive(value: Any) -> int | None:
    """A count as sent (an integer, or a float or string holding one), or None."""
    if value is None or isinstance(value, bool):  # None: most entries of a long list
        return None
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number > 0 else None
