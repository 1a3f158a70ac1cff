"""A run's final answer: ``finish_task`` checked against the pack's schema, then the work
checked by the pack's verifiers (ADR 0016); a rejected answer is a repair round."""

from __future__ import annotations

import time
from typing import Any

from fabric.application.verify import Verdict
from fabric.config.prompts import FINISH_INVALID, VERIFY_FAILED
from fabric.domain.errors import FabricError, ToolError
from fabric.domain.models import RunStatus

from .state import RunState, Stop, describe, ms_since

_SKIPPED = {"skipped": True}
_UNCHECKED = {
    "code": "cancelled",
    "message": "the run was cancelled as its final answer came, before the work was checked: "
    "the payload is the model's claim, unverified",
    "hint": "resume the run (fabric resume) to have the claim checked, or check it yourself",
}


def _unconfirmed(passes: list[str]) -> dict[str, str]:
    """Why a run whose checks all passed is not ``completed``: the passes, none a proof."""
    lines = "\n".join(f"- {p}" for p in passes)
    return {
        "code": "unconfirmed",
        "message": "the work passed every check, but none of them confirms it was done:\n" + lines,
        "hint": "read the result before you rely on it; a check that fails without the work "
        "(a test of the change, or verify.command / --verify naming one) lets fabric confirm "
        "it",
    }


class Finishing(RunState):
    """What a run does with ``finish_task``."""

    async def _finish(self, call_id: str, arguments: dict[str, Any]) -> str:
        errors = self.finish_check(arguments)
        if errors:
            problems = "\n".join(f"- {e}" for e in errors)
            self._count_repair(problems)
            raise ToolError(FINISH_INVALID.format(problems=problems))
        unconfirmed = await self._verify(call_id, arguments)
        if unconfirmed:
            raise Stop(RunStatus.COMPLETED_UNCONFIRMED, arguments, _unconfirmed(unconfirmed))
        raise Stop(RunStatus.COMPLETED, payload=arguments)

    async def _verify(self, call_id: str, payload: dict[str, Any]) -> list[str]:
        """Run the pack's checks of the work, each recorded as a ``verification`` event; a
        failed one goes back to the model as this finish_task's result (a repair round). A
        check that cannot run at all ends the run ``unverified``. A cancel ends the run
        before the next check, ``cancelled`` with the claim kept as its payload: unchecked,
        it is not ``completed``, and it is not thrown away either.

        When all pass, the passes that do not confirm the work (each ``check: summary``);
        empty when one of them confirms it, or when the pack has no checks."""
        unconfirmed: list[str] = []
        confirmed = not self.pack.verifiers
        for verifier in self.pack.verifiers:
            if self.cancel.is_set():
                raise Stop(RunStatus.CANCELLED, payload, _UNCHECKED)
            started = time.perf_counter()
            event = {"step": self.steps, "call_id": call_id, "check": verifier.name}
            try:
                verdict = await verifier.verify(payload, self.ctx, self.record)
            except FabricError as exc:
                error = describe(exc)
                self.log.emit(
                    "verification",
                    {
                        **event,
                        "ok": False,
                        "summary": f"the check could not run: {exc.message}",
                        "error": error,
                        "duration_ms": ms_since(started),
                    },
                )
                message = f"the work could not be verified ({verifier.name}): {exc.message}"
                raise Stop(RunStatus.UNVERIFIED, payload, {**error, "message": message}) from exc
            if verdict is None:
                verdict = Verdict(
                    True, "nothing to check in this run", detail=_SKIPPED, confirms=False
                )
            self.log.emit(
                "verification", {**event, **verdict.as_event(), "duration_ms": ms_since(started)}
            )
            if verdict.ok:
                confirmed = confirmed or verdict.confirms is not False
                unconfirmed.append(f"{verifier.name}: {verdict.summary}")
                continue
            self._count_repair(
                f"{verdict.summary}\n{verdict.evidence}".strip(),
                status=RunStatus.UNVERIFIED,
                payload=payload,
            )
            left = self.limits.finish_repairs - self.repairs + 1
            raise ToolError(
                VERIFY_FAILED.format(
                    summary=verdict.summary,
                    evidence=verdict.evidence,
                    left=left,
                )
            )
        return [] if confirmed else unconfirmed

    def _count_repair(
        self,
        problems: str,
        *,
        status: RunStatus = RunStatus.INVALID_OUTPUT,
        payload: dict[str, Any] | None = None,
    ) -> None:
        """One more rejected finish_task; end the run once the repair rounds are used up:
        ``invalid_output`` for arguments that never fit the schema, ``unverified`` (keeping
        the last claim as the payload) for work that never passed verification."""
        self.repairs += 1
        if self.repairs <= self.limits.finish_repairs:
            return
        rounds = f"{self.limits.finish_repairs} repair round(s)"
        if status is RunStatus.UNVERIFIED:
            error = {
                "code": "unverified",
                "message": f"the work still failed verification after {rounds}:\n{problems}",
                "hint": "see the verification events in the runlog (fabric show); try a "
                "stronger model, more steps, or a smaller task",
            }
        else:
            error = {
                "code": "invalid_output",
                "message": f"finish_task arguments were still invalid after {rounds}:\n{problems}",
                "hint": "use a stronger model or relax the pack's finish schema",
            }
        raise Stop(status, payload=payload, error=error)
