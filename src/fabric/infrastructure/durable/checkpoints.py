"""A durable run's steps on DBOS (ADR 0020): ``DbosCheckpoints``, what each outside effect of
a run records, and ``unrecorded``, a DBOS call from inside a workflow that is no step of it."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from dbos import DBOS

from fabric.domain.errors import RunError
from fabric.domain.secrets import Secrets

_T = TypeVar("_T")


def unrecorded_now(call: Callable[[], _T]) -> _T:
    """``call`` in a fresh context: a DBOS call made from inside a workflow would otherwise be
    recorded as one of its steps (and the steps of a run must be the same on every drive)."""
    return contextvars.Context().run(call)


async def unrecorded(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """The coroutine ``make()`` run in a fresh context (see ``unrecorded_now``)."""
    return await asyncio.create_task(make(), context=contextvars.Context())


class DbosCheckpoints:
    """``Checkpoints`` on DBOS steps. What a step records is redacted of ``secrets`` (as the
    runlog is); the run that took the step goes on with what it really got.

    A call that only looks is no DBOS step of its own (each costs two database round trips):
    its value rides with the next step's record, ``{"value": ..., "looks": [[name, value]]}``.
    A drive after a crash reads the workflow's records once, when it reaches its first look,
    and hands back the looks recorded with the step it reaches next; past the last record it
    makes every call."""

    def __init__(self, secrets: Secrets) -> None:
        self._secrets = secrets
        self._steps = 0
        """DBOS steps this drive has reached."""
        self._looks: list[list[Any]] = []
        """The looks made since the last step, to be recorded with the next one."""
        self._handed = 0
        """Looks handed back from the record of the next step."""
        self._records: list[Any] | None = None
        """What the workflow's steps recorded, read at the first look; [] once past them."""

    async def step(
        self, name: str, call: Callable[[], Awaitable[Any]], *, looks: bool = False
    ) -> Any:
        if looks:
            return await self._look(name, call)
        got: list[Any] = []
        riding = self._looks

        async def run() -> Any:  # DBOS awaits what a coroutine function returns, only that
            got.append(await call())
            return {"value": self._secrets.redact_obj(got[0]), "looks": riding}

        recorded = await DBOS.run_step_async({"name": name}, run)
        self._steps += 1
        self._looks, self._handed = [], 0
        return got[0] if got else recorded["value"]

    async def _look(self, name: str, call: Callable[[], Awaitable[Any]]) -> Any:
        ahead = await self._recorded_looks()
        if self._handed < len(ahead):
            recorded, value = ahead[self._handed]
            if recorded != name:
                raise RunError(
                    f"durable run {DBOS.workflow_id} went another way than recorded: "
                    f"{recorded} was recorded where it now calls {name}",
                    hint="a run can be continued only by the fabric version that began it",
                )
            self._handed += 1
            return value
        value = await call()
        self._looks.append([name, self._secrets.redact_obj(value)])
        return value

    async def _recorded_looks(self) -> list[Any]:
        """The looks recorded with the step this drive reaches next ([] past the records)."""
        if self._records is None:
            read = functools.partial(DBOS.list_workflow_steps_async, str(DBOS.workflow_id))
            self._records = [step["output"] for step in await unrecorded(read)]
        if self._steps >= len(self._records):
            self._records = []  # past them for good: the drive makes every call from here
            return []
        record = self._records[self._steps]
        return list(record.get("looks") or ()) if isinstance(record, dict) else []
