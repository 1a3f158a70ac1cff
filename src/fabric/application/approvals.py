"""The policy gate every tool call passes before it runs, and approvers that need no person.

For each call (``finish_task`` aside) the gate writes ``policy_decision``. ``allow`` lets the
call run; ``deny`` refuses it (``PolicyDenied``); ``ask`` puts it to the run's ``Approver``
(``approval_requested``, then ``approval``), bounded by the policy's ``approval_timeout`` and by
the run's cancellation. An answer for the whole run (scope ``run``) is remembered per tool and
rule, and answers later calls of that kind (by ``policy memory``) without asking again. A
refusal is raised as a ``ToolError``, so the loop turns it into the tool result the model sees.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from fabric.config.policy import PolicySettings
from fabric.domain.policy import (
    ApprovalAnswer,
    ApprovalDenied,
    ApprovalRequest,
    Decision,
    PolicyDenied,
    Scope,
    decide,
)

from .ports import Approver, RunLog

NO_TERMINAL = "no terminal"
NO_ELICITATION = "no elicitation"
"""An MCP client that cannot be asked (it does not support elicitation)."""
MCP = "mcp"
"""A person answered through an MCP client (elicitation)."""
TIMEOUT = "timeout"
MEMORY = "policy memory"
REPLAY = "replay"
_ASK_A_PERSON = (
    "a person can approve it by running again with --yes (fabric run/resume), by answering "
    "POST /tasks/{id}/approvals/{call_id} (fabric serve), or by changing sandbox.policy in "
    "fabric.yaml"
)
_ADAPT = "do not repeat this call; find another way, or finish and say what needs approval"


_STRICTER = {"allow": 0, "ask": 1, "deny": 2}


class PolicyGate:
    """Decides each tool call of one run, asking ``approver`` when the policy says ``ask``.
    ``outer``: the policies of the runs that delegated to this one, nearest first; each is
    checked too and the strictest verdict wins (a sub-run never does more than its parents
    allow)."""

    def __init__(
        self,
        policy: PolicySettings,
        *,
        approver: Approver | None,
        log: RunLog,
        run_id: str,
        cancel: asyncio.Event,
        outer: Sequence[PolicySettings] = (),
    ) -> None:
        self.policy, self.approver, self.log, self.outer = policy, approver, log, tuple(outer)
        self.run_id, self.cancel = run_id, cancel
        self.memory: dict[tuple[str, str | None], bool] = {}
        """Answers given "for this run", by (tool, rule)."""

    async def check(self, step: int, call_id: str, tool: str, arguments: Mapping[str, Any]) -> None:
        """Return when the call may run; raise ``PolicyDenied`` or ``ApprovalDenied`` when not."""
        decision = decide(self.policy, tool, arguments)
        for policy in self.outer:
            theirs = decide(policy, tool, arguments)
            if _STRICTER[theirs.verdict] > _STRICTER[decision.verdict]:
                why = f"the policy of the run that delegated this one: {theirs.reason}"
                decision = Decision(theirs.verdict, theirs.rule, why)
        base = {"step": step, "call_id": call_id, "tool": tool}
        self.log.emit(
            "policy_decision",
            {**base, "verdict": decision.verdict, "rule": decision.rule, "reason": decision.reason},
        )
        if decision.verdict == "allow":
            return
        if decision.verdict == "deny":
            reason = decision.reason
            raise PolicyDenied(f"the policy denies this {tool} call: {reason}", hint=_ADAPT)
        await self._approval(step, call_id, tool, arguments, decision, remember=True)

    async def confirm(
        self, step: int, call_id: str, tool: str, arguments: Mapping[str, Any], reason: str
    ) -> None:
        """Ask a person about a call whatever the policy says (a durable run's call that was
        cut off when its process died, ADR 0020); raise ``ApprovalDenied`` unless approved.
        Logged as any ask is (``approval_requested``, ``approval``), with ``reason``."""
        decision = Decision("ask", None, reason)
        await self._approval(step, call_id, tool, arguments, decision, remember=False)

    async def _approval(
        self,
        step: int,
        call_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        decision: Decision,
        *,
        remember: bool,
    ) -> None:
        key = (tool, decision.rule)
        if remember and key in self.memory:
            answer = ApprovalAnswer(self.memory[key], MEMORY, "run")
        elif self.approver is None:
            answer = ApprovalAnswer(False, NO_TERMINAL)
        else:
            answer = await self._ask(step, call_id, tool, arguments, decision, explain=not remember)
            if remember and answer.scope == "run":
                self.memory[key] = answer.approved
        approval = {"approved": answer.approved, "by": answer.by, "scope": answer.scope}
        self.log.emit("approval", {"step": step, "call_id": call_id, "tool": tool, **approval})
        if not answer.approved:
            raise _refusal(tool, decision, answer, self.policy.approval_timeout)

    async def _ask(
        self,
        step: int,
        call_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        decision: Decision,
        explain: bool = False,
    ) -> ApprovalAnswer:
        assert self.approver is not None
        timeout = self.policy.approval_timeout
        self.log.emit(
            "approval_requested",
            {
                "step": step,
                "call_id": call_id,
                "tool": tool,
                "arguments": dict(arguments),
                "rule": decision.rule,
                "timeout_s": timeout,
                **({"reason": decision.reason} if explain else {}),
            },
        )
        request = ApprovalRequest(
            self.run_id, step, call_id, tool, dict(arguments), decision.rule, decision.reason,
            timeout,
        )  # fmt: skip
        asking = asyncio.ensure_future(self.approver.request(request))
        stopping = asyncio.ensure_future(self.cancel.wait())
        try:
            done, _ = await asyncio.wait(
                {asking, stopping}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiting in (asking, stopping):
                if not waiting.done():
                    waiting.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await waiting  # the approver cleans up (e.g. closes its prompt)
        if asking in done:
            return asking.result()
        if stopping in done:
            raise ApprovalDenied(
                f"the run was cancelled while this {tool} call waited for approval; it was not run",
                hint="nothing to do: the run is ending",
            )
        return ApprovalAnswer(False, TIMEOUT)


def _refusal(
    tool: str, decision: Decision, answer: ApprovalAnswer, timeout: float
) -> ApprovalDenied:
    why = f"({decision.reason})"
    if answer.by == TIMEOUT:
        text = f"no one approved this {tool} call within {timeout:g} s, so it was not run {why}"
        return ApprovalDenied(text, hint=f"{_ADAPT}; {_ASK_A_PERSON}")
    if answer.by in (NO_TERMINAL, NO_ELICITATION):
        text = f"this {tool} call needs approval and no one could be asked ({answer.by}) {why}"
        return ApprovalDenied(text, hint=f"{_ADAPT}; {_ASK_A_PERSON}")
    if answer.by == MEMORY:
        text = f"this {tool} call was refused: such calls were refused for the rest of this run"
        return ApprovalDenied(text, hint=_ADAPT)
    return ApprovalDenied(f"a person refused this {tool} call ({answer.by}) {why}", hint=_ADAPT)


class RecordedApprover:
    """Answers as a recorded run was answered, from its ``approval`` events (for replay and
    resume): the same yes or no, for the same step and call id, by ``replay``. A call the
    recording has no answer for is denied.

    With ``then``, calls after step ``upto_step`` go to that approver instead (a resumed run:
    recorded answers for the steps redone, a live approver for the new ones)."""

    def __init__(
        self,
        events: Sequence[Mapping[str, Any]],
        *,
        then: Approver | None = None,
        upto_step: int | None = None,
    ) -> None:
        self._answers: dict[tuple[Any, Any], ApprovalAnswer] = {}
        for event in events:
            if event.get("kind") == "approval":
                scope: Scope = "run" if event.get("scope") == "run" else "once"
                answer = ApprovalAnswer(bool(event.get("approved")), REPLAY, scope)
                self._answers[(event.get("step"), event.get("call_id"))] = answer
        self._then, self._upto = then, upto_step

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self._upto is not None and request.step > self._upto:
            if self._then is None:
                return ApprovalAnswer(False, NO_TERMINAL)
            return await self._then.request(request)
        recorded = self._answers.get((request.step, request.call_id))
        return recorded if recorded is not None else ApprovalAnswer(False, REPLAY)


class AutoApprover:
    """Approves every call, as ``by`` (``fabric run --yes``: ``"cli --yes"``)."""

    def __init__(self, by: str) -> None:
        self.by = by

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer(True, self.by)
