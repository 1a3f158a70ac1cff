"""A ``ChatClient`` and a ``ModelCatalog`` for Anthropic's Messages API (``/v1/messages``).

Requests carry ``x-api-key`` and ``anthropic-version``; the history is translated at this edge
(``anthropic_wire``) and replies are read whole or as server-sent events (``anthropic_stream``),
within ``request_timeout`` seconds for the whole request.
httpx errors and error replies become fabric errors here, the same ones every adapter raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from fabric.application.ports import DeltaSink
from fabric.domain.errors import ModelAuthError, ModelResponseError
from fabric.domain.models import ChatRequest, ChatResponse, ModelInfo
from fabric.domain.secrets import Secrets

from .anthropic_stream import Reply, count, parse_message, read_stream
from .anthropic_wire import to_anthropic_messages, to_anthropic_tools, to_chat_response
from .http import (
    DEFAULT_REQUEST_TIMEOUT,
    ClientPool,
    ModelHttp,
    encode_json,
    within_deadline,
)
from .http_errors import BODY_LIMIT, key_secrets, status_error, transport_error
from .text_tool_calls import apply_text_tool_calls

ANTHROPIC_VERSION = "2023-06-01"
_JSON = {"content-type": "application/json"}
_MAX_PAGES = 20


class AnthropicChatClient:
    """One Claude model over the Messages API; streams by default. ``pool``: as for
    ``OpenAIChatClient``."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        max_tokens: int,
        timeout: httpx.Timeout | float,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        stream: bool = True,
        temperature: float | None = None,
        text_tool_calls: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        pool: ClientPool | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        self._model = model
        self._api_key = api_key
        self._secrets = key_secrets(api_key) if secrets is None else secrets
        self._url = _root(base_url) + "/v1/messages"
        self._server = f"the Anthropic API at {_root(base_url)}"
        self._request_timeout = request_timeout
        self._max_tokens = max_tokens
        self._stream = stream
        self._temperature = temperature
        self._text_tool_calls = text_tool_calls
        self._use = ModelHttp(
            base_url, timeout=timeout, headers=_headers(api_key), transport=transport, pool=pool
        )

    @property
    def model(self) -> str:
        return self._model

    async def chat(self, request: ChatRequest) -> ChatResponse:
        _require_key(self._api_key)
        system, turns = to_anthropic_messages(request.messages)
        body: dict[str, Any] = {"model": self._model, "max_tokens": self._max_tokens}
        if system:
            body["system"] = system
        body["messages"] = turns
        if request.tools:
            body["tools"] = to_anthropic_tools(request.tools)
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if self._stream:
            body["stream"] = True
        try:
            sent = self._send(encode_json(body), request.on_delta)
            reply = await within_deadline(sent, self._request_timeout, self._url)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self._url) from exc
        response = to_chat_response(reply)
        if self._text_tool_calls:
            return apply_text_tool_calls(response, request.tools)
        return response

    async def _send(self, content: bytes, on_delta: DeltaSink | None) -> Reply:
        request = self._use.client.build_request("POST", self._url, content=content, headers=_JSON)
        response = await self._use.client.send(request, stream=self._stream)
        try:
            if response.status_code >= 400:
                await response.aread()
                raise status_error(
                    response.status_code,
                    response.text,
                    response.headers,
                    model=self._model,
                    server=self._server,
                    secrets=self._secrets,
                )
            if self._stream and "text/event-stream" in response.headers.get("content-type", ""):
                lines = response.aiter_lines()
                return await read_stream(
                    lines, on_delta, model=self._model, server=self._server, secrets=self._secrets
                )
            await response.aread()
            return parse_message(_json(response, self._server))
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._use.aclose()


class AnthropicCatalog:
    """The models an Anthropic API key can use (``GET /v1/models``). All of them call tools."""

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        api_key: str | None,
        timeout: httpx.Timeout | float,
        transport: httpx.AsyncBaseTransport | None = None,
        secrets: Secrets | None = None,
        pool: ClientPool | None = None,
    ) -> None:
        self._name = name
        self._base_url = base_url
        self._pool = pool
        self._api_key = api_key
        self._secrets = key_secrets(api_key) if secrets is None else secrets
        self._url = _root(base_url) + "/v1/models"
        self._server = f"the Anthropic API at {_root(base_url)}"
        self._timeout = timeout
        self._transport = transport

    @property
    def backend(self) -> str:
        return self._name

    async def list_models(self) -> list[ModelInfo]:
        _require_key(self._api_key)
        models: list[ModelInfo] = []
        params: dict[str, str | int] = {"limit": 1000}
        use = ModelHttp(
            self._base_url, timeout=self._timeout, headers=_headers(self._api_key),
            transport=self._transport, pool=self._pool,
        )  # fmt: skip
        http = use.client
        try:
            for _ in range(_MAX_PAGES):
                try:
                    response = await http.get(self._url, params=params)
                except httpx.HTTPError as exc:
                    raise transport_error(exc, self._url) from exc
                if response.status_code >= 400:
                    raise status_error(
                        response.status_code,
                        response.text,
                        response.headers,
                        model="(listing models)",
                        server=self._server,
                        secrets=self._secrets,
                    )
                page = _json(response, self._server)
                data = page.get("data") if isinstance(page, Mapping) else None
                if not isinstance(data, list):
                    raise ModelResponseError(
                        f"{self._server} listed models without a data list: {str(page)[:300]}",
                        hint="check the anthropic backend's base_url",
                        body=str(page)[:BODY_LIMIT],
                    )
                models.extend(self._info(item) for item in data if isinstance(item, Mapping))
                if not page.get("has_more") or not page.get("last_id"):
                    break
                params["after_id"] = str(page["last_id"])
        finally:
            await use.aclose()
        return [m for m in models if m.name]

    def _info(self, item: Mapping[str, Any]) -> ModelInfo:
        context = count(item.get("max_input_tokens")) or None
        return ModelInfo(str(item.get("id") or ""), self._name, True, context_length=context)


def _root(base_url: str) -> str:
    """The API root: ``https://api.anthropic.com``, also when the configured URL ends in
    ``/v1``."""
    return base_url.rstrip("/").removesuffix("/v1").rstrip("/")


def _headers(api_key: str | None) -> dict[str, str]:
    return {"x-api-key": api_key or "", "anthropic-version": ANTHROPIC_VERSION}


def _require_key(api_key: str | None) -> None:
    if not api_key:
        raise ModelAuthError(
            "no API key for the Anthropic API: the anthropic backend needs one",
            hint="set ANTHROPIC_API_KEY (or a variable named in the backend's api_key_env) "
            "to your Anthropic API key, or pick another backend with --backend",
        )


def _json(response: httpx.Response, server: str) -> Any:
    try:
        return response.json()
    except (ValueError, RecursionError) as exc:
        raise ModelResponseError(
            f"{server} sent a reply that is not JSON: {response.text[:200]!r}",
            hint="check that the anthropic backend's base_url points at the Anthropic API",
            status_code=response.status_code,
            body=response.text[:BODY_LIMIT],
        ) from exc
