"""Chat clients that wrap another: retries with backoff, and a fallback chain.

``RetryingChatClient`` tries a model call again when the failure may pass (``retryable``:
429 rate limits, 5xx, connection failures, timeouts, a request that ran past its deadline
``llm.timeouts.request``) and never on the others (400, 401, 403, 404, a model that cannot
call tools...), which propagate at once. Waits:

- the server's ``Retry-After`` when it sent one, as is (not capped by ``max_delay``);
- otherwise exponential backoff with *equal jitter*: ``d = min(max_delay, initial_delay *
  2**(n-1))`` before retry ``n``, and the wait is ``d/2 + random() * d/2``, so a struggling
  server always gets at least half the backoff and clients spread out over the other half.

It gives up after ``attempts`` tries in all, or when the next wait would take the waiting past
``total_time`` seconds. Each retry is an ``llm_retry`` event. The error it gives up with is the
last one, unchanged in type and code, with "gave up after N tries" added to its message and
``retries_exhausted`` set (read it with ``retries_exhausted(exc)``): that is what a fallback
step with ``on: [retries_exhausted]`` reacts to.
The waits are plain ``sleep``s, so cancelling the call (as the loop does when a run is
cancelled) ends a wait at once too.

``FallbackChatClient`` switches models, in the order configured, only when the current one
fails with a capability error (``ModelCapabilityError``: cannot call tools, context too long)
and a step lists ``capability``, or fails after exhausted retries and a step lists
``retries_exhausted``. Each switch is an ``llm_fallback`` event, the same request goes to the
new model, and the run stays on it. Steps are taken forward only: a step passed over is not
used later. Wrap each client in a ``RetryingChatClient`` *inside* the fallback, so retries
happen before a switch.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fabric.config.schema import FallbackStep, RetrySettings
from fabric.domain.errors import ModelCapabilityError, ModelError
from fabric.domain.models import ChatRequest, ChatResponse

from .ports import ChatClient, EventObserver

Sleep = Callable[[float], Awaitable[None]]


def retries_exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` is the error a ``RetryingChatClient`` gave up with."""
    return getattr(exc, "retries_exhausted", False) is True


def _give_up(exc: ModelError, tries: int, waited: float) -> None:
    """Mark ``exc`` as the error retries ended with, and say so in its message."""
    plural = "try" if tries == 1 else "tries"
    exc.message = f"{exc.message} (gave up after {tries} {plural}, {waited:.1f} s of waiting)"
    exc.retries_exhausted = True  # type: ignore[attr-defined]


def _error(exc: ModelError) -> dict[str, Any]:
    return {"code": exc.code, "message": exc.message}


class RetryingChatClient:
    """``inner``, with retries as described in the module docstring."""

    def __init__(
        self,
        inner: ChatClient,
        retry: RetrySettings,
        *,
        on_event: EventObserver,
        sleep: Sleep = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.inner = inner
        self._retry = retry
        self._on_event = on_event
        self._sleep = sleep
        self._rng = rng

    @property
    def model(self) -> str:
        return self.inner.model

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1-based) when the server named none."""
        cap = min(self._retry.max_delay, self._retry.initial_delay * 2.0 ** (retry - 1))
        return cap / 2 + self._rng() * cap / 2

    async def chat(self, request: ChatRequest) -> ChatResponse:
        attempts, waited = self._retry.attempts, 0.0
        for attempt in range(1, attempts + 1):
            try:
                return await self.inner.chat(request)
            except ModelError as exc:
                if not exc.retryable:
                    raise
                wait = exc.retry_after if exc.retry_after is not None else self.backoff(attempt)
                if attempt == attempts or waited + wait > self._retry.total_time:
                    _give_up(exc, attempt, waited)
                    raise
                event: dict[str, Any] = {
                    "attempt": attempt + 1,
                    "of": attempts,
                    "wait_s": round(wait, 3),
                    "error": _error(exc),
                }
                if exc.status_code is not None:
                    event["status_code"] = exc.status_code
                self._on_event("llm_retry", event)
                await self._sleep(wait)
                waited += wait
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def aclose(self) -> None:
        await self.inner.aclose()


ClientFactory = Callable[[], ChatClient | Awaitable[ChatClient]]
"""Builds a fallback step's client when it is first needed (it may be a coroutine function)."""


class FallbackChatClient:
    """``primary``, then the clients of ``steps`` as described in the module docstring.

    Each step's client is built by its factory (a function or a coroutine function) only when
    the chain reaches it. ``backend`` names the primary's backend for the ``llm_fallback``
    event, when known.
    """

    def __init__(
        self,
        primary: ChatClient,
        steps: Sequence[tuple[FallbackStep, ClientFactory]],
        *,
        on_event: EventObserver,
        backend: str | None = None,
    ) -> None:
        self._current = primary
        self._backend = backend
        self._steps = list(steps)
        self._on_event = on_event
        self._clients: list[ChatClient] = [primary]

    @property
    def model(self) -> str:
        return self._current.model

    @property
    def backend(self) -> str | None:
        """The backend of the client in use (None: the primary's, not given)."""
        return self._backend

    async def chat(self, request: ChatRequest) -> ChatResponse:
        while True:
            try:
                return await self._current.chat(request)
            except ModelError as exc:
                trigger = _trigger(exc)
                index = next(
                    (i for i, (step, _) in enumerate(self._steps) if trigger in step.on), None
                )
                if trigger is None or index is None:
                    raise
                step, factory = self._steps[index]
                del self._steps[: index + 1]
                await self._switch(step, factory, exc)

    async def _switch(self, step: FallbackStep, factory: ClientFactory, exc: ModelError) -> None:
        made = factory()
        client = await made if inspect.isawaitable(made) else made
        self._clients.append(client)
        source: dict[str, Any] = {"model": self._current.model}
        if self._backend is not None:
            source["backend"] = self._backend
        self._on_event(
            "llm_fallback",
            {
                "from": source,
                "to": {"backend": step.backend, "model": client.model},
                "reason": exc.code,
                "message": exc.message,
            },
        )
        self._current, self._backend = client, step.backend

    async def aclose(self) -> None:
        """Close every client this one created, the primary included; the first failure is
        raised after all were tried."""
        failure: BaseException | None = None
        for client in self._clients:
            try:
                await client.aclose()
            except Exception as exc:  # close the others anyway
                failure = failure or exc
        if failure is not None:
            raise failure


def _trigger(exc: ModelError) -> str | None:
    if isinstance(exc, ModelCapabilityError):
        return "capability"
    if retries_exhausted(exc):
        return "retries_exhausted"
    return None
