"""A tool call's time limit (``application/loop/deadline.py``): what a call sees is what
``asyncio.timeout`` would give it, whether it answers at once, waits, or is cut off."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable
from typing import Any

import pytest

from fabric.application.loop.deadline import Expired, within


def _run(call: Awaitable[Any], seconds: float) -> Any:
    async def go() -> Any:
        return await within(call, seconds)

    return asyncio.run(go())


def test_a_call_that_answers_at_once_gets_its_answer() -> None:
    async def at_once() -> str:
        return "done"

    assert _run(at_once(), 5) == "done"


def test_a_call_that_waits_again_and_again_gets_its_answer() -> None:
    async def waits() -> list[int]:
        seen = []
        for n in range(3):
            await asyncio.sleep(0)
            seen.append(n)
            await asyncio.sleep(0.01)
        return seen

    assert _run(waits(), 5) == [0, 1, 2]


def test_a_call_that_waits_past_its_deadline_is_cancelled_where_it_waits() -> None:
    cleaned: list[str] = []

    async def hangs() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cleaned.append("cancelled where it waited")
            raise
        return "never"

    with pytest.raises(Expired):
        _run(hangs(), 0.05)
    assert cleaned == ["cancelled where it waited"]


def test_the_deadline_counts_from_the_start_of_the_call_not_its_first_wait() -> None:
    async def busy_then_waits() -> str:
        time.sleep(0.2)  # work that keeps the loop from running, past the deadline
        await asyncio.sleep(30)
        return "never"

    with pytest.raises(Expired):
        _run(busy_then_waits(), 0.1)


def test_a_timeout_the_call_raises_itself_is_its_own() -> None:
    async def at_once() -> str:
        raise TimeoutError("its backend did not answer")

    async def after_a_wait() -> str:
        await asyncio.sleep(0)
        raise TimeoutError("its backend did not answer")

    for call in (at_once(), after_a_wait()):
        with pytest.raises(TimeoutError, match="its backend"):
            _run(call, 5)


def test_a_call_that_takes_the_cancel_and_answers_is_not_cut_off() -> None:
    async def shrugs() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "stopped early, here is what I have"
        return "never"

    assert _run(shrugs(), 0.05) == "stopped early, here is what I have"


def test_a_cancel_of_the_run_reaches_the_waiting_call_and_is_no_expiry() -> None:
    cleaned: list[str] = []

    async def hangs() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("cleaned up")
        return "never"

    async def go() -> None:
        task = asyncio.ensure_future(within(hangs(), 30))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert cleaned == ["cleaned up"]


def test_an_awaitable_that_is_no_coroutine_is_awaited_as_it_is() -> None:
    async def go() -> Any:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, future.set_result, "from a future")
        return await within(future, 5)

    assert asyncio.run(go()) == "from a future"


def test_a_call_that_turns_the_cancel_into_its_own_error_has_no_cancel_behind_it() -> None:
    """As with ``asyncio.timeout``: the error raised after the handler is not "during the
    handling of" the cancel."""

    async def gives_up() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped = True
        if stopped:
            raise RuntimeError("stopped before the end")
        return "never"

    async def go() -> BaseException:
        task = asyncio.ensure_future(within(gives_up(), 30))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except RuntimeError as exc:
            return exc
        raise AssertionError("the call's own error did not come through")

    error = asyncio.run(go())
    assert str(error) == "stopped before the end" and error.__context__ is None


def test_what_the_call_first_waited_for_is_not_kept_while_it_waits_again() -> None:
    """A large first result (a command's output) is the call's to let go of."""

    class Big:
        pass

    seen: list[weakref.ref[Big]] = []
    gone_while_waiting: list[bool] = []

    async def two_waits() -> str:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Big] = loop.create_future()
        loop.call_soon(future.set_result, Big())
        big = await future
        seen.append(weakref.ref(big))
        del big, future
        await asyncio.sleep(0.05)  # the second wait, during which ``watch`` looks
        return "done"

    async def watch() -> None:
        await asyncio.sleep(0.02)
        gone_while_waiting.append(seen[0]() is None)

    async def go() -> list[Any]:
        return await asyncio.gather(within(two_waits(), 5), watch())

    assert asyncio.run(go())[0] == "done"
    assert gone_while_waiting == [True]
