"""A tool call's time limit, with its timer armed only once the call waits.

``asyncio.timeout`` schedules a timer on the event loop and cancels it again: about 10 µs a
call on the machine fabric is measured on, for every call. A call that answers without ever
waiting (a recorded result in a replay or a resume, a tool that needs no I/O) cannot be cut
off by any timer, since the loop never runs while it does. So the call is first run up to its
first wait; only a call that does wait gets the timer, set to the deadline counted from the
call's start. What a cut-off call sees is what ``asyncio.timeout`` gives it: a cancel where it
waits. One difference: a call whose first step alone runs past the deadline (busy work that
keeps the loop from running) is cancelled at its first wait, where ``asyncio.timeout`` would
let it take one more pass of the loop first.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class Expired(Exception):
    """The call was cut off at its deadline (a ``TimeoutError`` the call raises itself is its
    own, and goes on as it is)."""


async def within(call: Awaitable[T], seconds: float) -> T:
    """``await call``, cut off after ``seconds`` with ``Expired``."""
    loop = asyncio.get_running_loop()
    when = loop.time() + seconds
    if not isinstance(call, types.CoroutineType):  # an awaitable of another kind: as it is
        return await _timed(call, when)
    try:
        waiting = call.send(None)  # up to the first wait, or to the end
    except StopIteration as done:
        result: T = done.value
        return result
    rest = _resumed(call, waiting)
    del waiting  # what the call waits for is the call's to keep, not this frame's
    return await _timed(rest, when)


async def _timed(call: Awaitable[T], when: float) -> T:
    try:
        async with asyncio.timeout_at(when) as deadline:
            return await call
    except TimeoutError:
        if deadline.expired():
            raise Expired from None
        raise


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, T], waiting: Any) -> Generator[Any, None, T]:
    """Go on with ``coro``, which stopped to wait for ``waiting``: the task waits for that, as
    it would have, and then ``yield from`` resumes the call as the task resumes any (``send``
    of None). A cancel that comes first (the timer's, the run's) is passed to the call where
    it waits, as the task would pass it, and a close closes it, as ``yield from`` would."""
    while True:
        try:
            yield waiting
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            thrown = exc
        else:
            waiting = None
            rest: T = yield from coro
            return rest
        try:  # thrown outside the handler: the call sees no exception being handled
            waiting = coro.throw(thrown)
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            del thrown


__all__ = ["Expired", "within"]
