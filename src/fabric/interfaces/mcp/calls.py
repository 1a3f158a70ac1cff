"""A ``tools/call`` of a pack: the run it starts, and what the run has to say to the client
while it goes on (a progress notification per step, the calls its policy asks about, its end).

The run is a task of its own that outlives one request: on the 2026-07-28 revision a question
to the client is the call's answer (``InputRequiredResult``) and the client calls again with the
reply, so the run waits for its approval between two requests. On older revisions the question
is an ``elicitation/create`` request sent while the call is open. A client that cannot be asked
gets the call refused, with a note in the result saying so and what to do.

A client that cancels the call (or drops it) cancels the run: it ends ``cancelled``."""

from __future__ import annotations

import asyncio
import secrets as random
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from msgspec import Struct, field

from fabric.application.approvals import MCP, NO_ELICITATION
from fabric.domain.errors import FabricError
from fabric.domain.models import ChatDelta, RunResult
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest

APPROVAL = "approval"
"""The key of the question in an ``InputRequiredResult``."""
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Run this call?"},
    },
    "required": ["approve"],
}


class _Ask(Struct):
    request: ApprovalRequest
    answer: asyncio.Future[ApprovalAnswer]


class _Step(Struct):
    step: int
    message: str


class _Done(Struct):
    result: RunResult | FabricError


Item = _Ask | _Step | _Done


class LiveCall(Struct):
    """One run started by a ``tools/call``; its ``key`` is the ``requestState`` a client on the
    2026-07-28 revision sends back with its answer."""

    max_steps: int
    key: str = field(default_factory=lambda: random.token_urlsafe(24))
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    items: asyncio.Queue[Item] = field(default_factory=asyncio.Queue)
    notes: list[str] = field(default_factory=list)
    """What the client should know besides the result (calls it could not be asked about)."""
    waiting: _Ask | None = None
    """The question the client was sent and has not answered (2026-07-28 revision)."""
    task: asyncio.Task[None] | None = None
    following: bool = False
    """A ``tools/call`` is reporting this run to its client now."""

    # RunObserver
    def event(self, event: Mapping[str, Any]) -> None:
        if event.get("kind") == "llm_response" and isinstance(event.get("step"), int):
            step = int(event["step"])
            self.items.put_nowait(_Step(step, f"step {step} of at most {self.max_steps}"))

    def delta(self, delta: ChatDelta) -> None:
        return None

    # Approver
    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        answer: asyncio.Future[ApprovalAnswer] = asyncio.get_running_loop().create_future()
        self.items.put_nowait(_Ask(request, answer))
        try:
            return await answer
        finally:
            answer.cancel()  # timed out or cancelled: a late reply finds it settled

    def finished(self, result: RunResult | FabricError) -> None:
        self.items.put_nowait(_Done(result))


class Calls:
    """The runs started by ``tools/call`` that are going on, by key."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.live: dict[str, LiveCall] = {}

    def busy(self) -> bool:
        """Whether ``limit`` runs are going on (ended ones kept for a late answer do not count)."""
        going = [c for c in self.live.values() if c.task is None or not c.task.done()]
        return len(going) >= self.limit

    def add(self, call: LiveCall) -> None:
        self.live[call.key] = call

    def take(self, key: str | None) -> LiveCall | None:
        """The run a client's answer is for (``requestState``), or None."""
        return self.live.get(key) if isinstance(key, str) else None

    def drop(self, call: LiveCall) -> None:
        self.live.pop(call.key, None)


async def follow(
    calls: Calls,
    call: LiveCall,
    ctx: Any,
    responses: Mapping[str, Any] | None,
    finish: Any,
) -> types.CallToolResult | types.InputRequiredResult:
    """Answer one ``tools/call`` round for ``call``: pass on the client's reply to the
    question it was asked, then report steps until the run ends (``finish(result)`` makes the
    tool result) or asks again. Cancelled (the client cancelled): the run is cancelled and
    waited for."""
    if call.following:
        return _refused("this run is being followed by another call of this client already")
    call.following = True
    if call.waiting is not None:
        ask, call.waiting = call.waiting, None
        _settle(ask, _answer_of((responses or {}).get(APPROVAL)))
    try:
        while True:
            item = await call.items.get()
            if isinstance(item, _Step):
                await ctx.session.report_progress(item.step, call.max_steps, item.message)
            elif isinstance(item, _Done):
                calls.drop(call)
                result: types.CallToolResult = finish(item.result, call.notes)
                return result
            elif item.answer.done():
                continue  # timed out before the client was asked
            elif not _can_elicit(ctx):
                call.notes.append(_cannot_ask_note(item.request))
                _settle(item, ApprovalAnswer(False, NO_ELICITATION))
            elif ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                call.waiting, call.following = item, False
                question = types.ElicitRequest(params=_form(item.request))
                return types.InputRequiredResult(
                    input_requests={APPROVAL: question}, request_state=call.key
                )
            else:
                _settle(item, await _elicit(ctx, item.request, call.notes))
    except BaseException:
        if call.task is not None and not call.task.done():
            call.cancel.set()
            with anyio.CancelScope(shield=True):
                await asyncio.wait([call.task])
        calls.drop(call)
        raise


async def _elicit(ctx: Any, request: ApprovalRequest, notes: list[str]) -> ApprovalAnswer:
    """Ask with ``elicitation/create`` (older revisions); a failed request refuses the call."""
    params = _form(request)
    try:
        reply = await ctx.session.elicit_form(
            params.message, params.requested_schema, related_request_id=ctx.request_id
        )
    except Exception as exc:  # the client failed to ask: refused, and the client is told
        notes.append(
            f"Asking about a {request.tool} call failed ({type(exc).__name__}: "
            f"{str(exc)[:200]}), so the call was refused."
        )
        return ApprovalAnswer(False, NO_ELICITATION)
    return _answer_of(reply)


def _refused(message: str) -> types.CallToolResult:
    text = f"{message}. What to do: wait for that call's result, or call the tool again."
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _can_elicit(ctx: Any) -> bool:
    """Whether the client declared form elicitation (a bare ``elicitation: {}`` counts)."""
    caps = ctx.session.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def _form(request: ApprovalRequest) -> types.ElicitRequestFormParams:
    arguments = str(dict(request.arguments))
    if len(arguments) > 2000:
        arguments = arguments[:2000] + " …"
    message = (
        f"fabric's run {request.run_id} wants to call {request.tool} with {arguments}. "
        f"Its pack's policy asks first: {request.reason}. Approve this call?"
    )
    return types.ElicitRequestFormParams(message=message, requested_schema=_SCHEMA)


def _answer_of(reply: Any) -> ApprovalAnswer:
    """A client's reply as an answer: only an accepted form with ``approve`` exactly true
    approves; anything else (declined, cancelled, malformed) refuses."""
    action: Any
    if isinstance(reply, types.ElicitResult):
        action, content = reply.action, reply.content
    elif isinstance(reply, Mapping):
        action, content = reply.get("action"), reply.get("content")
    else:
        return ApprovalAnswer(False, MCP)
    approved = (
        action == "accept" and isinstance(content, Mapping) and content.get("approve") is True
    )
    return ApprovalAnswer(approved, MCP)


def _settle(ask: _Ask, answer: ApprovalAnswer) -> None:
    if not ask.answer.done():
        ask.answer.set_result(answer)


def _cannot_ask_note(request: ApprovalRequest) -> str:
    return (
        f"The pack's policy asks before {request.tool} calls ({request.reason}), and this MCP "
        "client does not support elicitation, so no one could be asked and the call was "
        "refused. Use a client that supports elicitation, or change the rule in the pack's "
        "sandbox.policy in fabric.yaml (allow or deny)."
    )
