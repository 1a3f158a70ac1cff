"""A runner keeps its connections to a model server from one run to the next (``ClientPool``):
a run reuses the connection a run before it opened, runs at the same time have one each, and
the runner lets go of them when it is closed, or when the event loop they were opened in ends.
Against a real loopback HTTP server that counts TCP connections."""

from __future__ import annotations

import asyncio
import gc
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.domain.models import RunResult
from fabric.infrastructure.llm.http import IDLE_CLIENTS, ClientPool, ModelHttp
from fabric.interfaces.compose import Runner, build_runner
from fabric.testing import MockOpenAIServer, completion

CONFIG = """
    llm:
      backend: mock
      backends: {mock: {kind: openai, base_url: "%(url)s", stream: %(stream)s}}
      models: {default: mock}
    runs_dir: runs
    packs:
      helper:
        builder: declarative
        system_prompt: You help.
        tools: [read_file]
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
"""
FINISH = completion(None, [("finish_task", {"answer": "done"})])
T = TypeVar("T")


def _runner(folder: Path, server: MockOpenAIServer, *, stream: bool = False) -> Runner:
    (folder / "ws").mkdir(exist_ok=True)
    config = folder / "fabric.yaml"
    text = CONFIG % {"url": server.base_url, "stream": str(stream).lower()}
    config.write_text(textwrap.dedent(text))
    return build_runner(load_config(config))


async def _runs(runner: Runner, folder: Path, count: int) -> list[RunResult]:
    request = RunRequest("helper", "answer", workspace=folder / "ws")
    return [await runner.run(request) for _ in range(count)]


def _then_closed(runner: Runner, work: Callable[[], Awaitable[T]]) -> T:
    """``work`` in a loop of its own, then ``Runner.aclose`` in that loop, as a command does."""

    async def main() -> T:
        try:
            return await work()
        finally:
            await runner.aclose()

    return asyncio.run(main())


def _chats(server: MockOpenAIServer) -> list[int]:
    """The connection each chat request came on."""
    return [
        number
        for body, number in zip(server.requests, server.connections, strict=True)
        if body["_path"] == "/v1/chat/completions"
    ]


def _all_closed(server: MockOpenAIServer) -> bool:
    """Whether the server saw every connection end (its threads notice within moments)."""
    deadline = time.monotonic() + 10
    while server.open_connections and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.open_connections == 0


def test_a_runner_s_runs_one_after_another_use_one_connection_closed_with_the_runner(
    tmp_path: Path,
) -> None:
    with MockOpenAIServer([FINISH] * 3) as server:
        runner = _runner(tmp_path, server)

        async def three() -> tuple[list[RunResult], int]:
            return await _runs(runner, tmp_path, 3), server.open_connections

        results, open_during = _then_closed(runner, three)
        assert [r.status.value for r in results] == ["completed"] * 3
        chats = _chats(server)
        assert len(chats) == 3 and len(set(chats)) == 1  # three runs, one connection
        assert open_during >= 1  # kept open from one run to the next
        assert _all_closed(server)  # Runner.aclose let go of it


def test_the_model_listing_and_the_run_after_it_share_one_connection(tmp_path: Path) -> None:
    """``fabric run`` lists the server's models, then runs: one connection serves both (one
    TLS handshake with a cloud API, not two)."""
    with MockOpenAIServer([FINISH]) as server:
        runner = _runner(tmp_path, server)
        results = _then_closed(runner, lambda: _runs(runner, tmp_path, 1))
        assert [r.status.value for r in results] == ["completed"]
        assert len(server.listed_on) == 1 and server.listed_on == _chats(server)
        assert _all_closed(server)


def test_streamed_runs_reuse_the_connection_too(tmp_path: Path) -> None:
    with MockOpenAIServer([FINISH] * 2) as server:
        runner = _runner(tmp_path, server, stream=True)

        results = _then_closed(runner, lambda: _runs(runner, tmp_path, 2))
        assert [r.status.value for r in results] == ["completed"] * 2
        chats = _chats(server)
        assert len(chats) == 2 and len(set(chats)) == 1
        assert _all_closed(server)


def test_runs_at_the_same_time_have_a_connection_each_which_later_runs_reuse(
    tmp_path: Path,
) -> None:
    """Two runs at once each ask the model on a connection of their own (the server answers
    neither before both asked); the run after them takes one of the two again."""
    both = threading.Barrier(2, timeout=30)
    asked = 0

    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        nonlocal asked
        asked += 1
        if asked <= 2:
            both.wait()
        return 200, FINISH

    with MockOpenAIServer(answer) as server:
        runner = _runner(tmp_path, server)
        request = RunRequest("helper", "answer", workspace=tmp_path / "ws")

        async def together() -> list[RunResult]:
            results = list(await asyncio.gather(runner.run(request), runner.run(request)))
            return results + await _runs(runner, tmp_path, 1)

        results = _then_closed(runner, together)
        assert [r.status.value for r in results] == ["completed"] * 3
        first, second, third = _chats(server)
        assert first != second and third in (first, second)
        assert _all_closed(server)


def test_a_loop_s_connections_close_as_it_ends_and_the_next_loop_opens_its_own(
    tmp_path: Path,
) -> None:
    """As a command runs one ``asyncio.run`` after another with one runner: the first loop's
    connection closes when that loop ends, without ``aclose``; the next loop's runs connect
    again (a connection cannot move between loops), and nothing is left for the garbage
    collector to complain about."""
    with MockOpenAIServer([FINISH] * 3) as server:
        runner = _runner(tmp_path, server)
        first = asyncio.run(_runs(runner, tmp_path, 2))
        assert _all_closed(server)  # the loop closed it as it ended

        second = _then_closed(runner, lambda: _runs(runner, tmp_path, 1))
        gc.collect()  # an unclosed socket or transport would warn here (warnings are errors)
        assert [r.status.value for r in [*first, *second]] == ["completed"] * 3
        chats = _chats(server)
        assert chats[0] == chats[1] != chats[2]
        assert _all_closed(server)


def test_a_connection_the_server_dropped_is_replaced(tmp_path: Path) -> None:
    """The server restarts between two runs (same address): the next run connects anew."""
    with MockOpenAIServer([FINISH] * 2) as server:
        runner = _runner(tmp_path, server)

        async def around_a_restart() -> list[RunResult]:
            done = await _runs(runner, tmp_path, 1)
            await asyncio.to_thread(server.drop_connections)
            return done + await _runs(runner, tmp_path, 1)

        results = _then_closed(runner, around_a_restart)
        assert [r.status.value for r in results] == ["completed"] * 2
        chats = _chats(server)
        assert len(chats) == 2 and chats[0] != chats[1]


def test_a_client_given_back_twice_is_given_back_once() -> None:
    """A chat client closed twice (wrappers may each close it) gives its HTTP client back
    once: the second close must not take it from the run that has it by then."""

    async def main() -> None:
        pool = ClientPool()
        url = "http://127.0.0.1:9/v1"
        first = ModelHttp(url, timeout=5.0, pool=pool)
        await first.aclose()
        second = ModelHttp(url, timeout=5.0, pool=pool)
        assert second.client is first.client  # the one given back, taken again
        await first.aclose()  # again: nothing happens
        third = ModelHttp(url, timeout=5.0, pool=pool)
        assert third.client is not second.client and not second.client.is_closed
        await second.aclose()
        await third.aclose()
        await pool.aclose()
        assert first.client.is_closed and third.client.is_closed

    asyncio.run(main())


def test_the_client_idle_longest_is_closed_past_the_pool_s_bound() -> None:
    """Servers come and go (the embedded one starts anew on another port): the pool keeps
    IDLE_CLIENTS idle clients in all, and closes the one idle longest past that."""

    async def main() -> None:
        pool = ClientPool()
        uses = [
            ModelHttp(f"http://127.0.0.1:{port}/v1", timeout=5.0, pool=pool)
            for port in range(9000, 9001 + IDLE_CLIENTS)
        ]
        for use in uses:
            await use.aclose()
        assert uses[0].client.is_closed
        assert not any(use.client.is_closed for use in uses[1:])
        again = ModelHttp("http://127.0.0.1:9001/v1", timeout=5.0, pool=pool)
        assert again.client is uses[1].client  # still kept, and taken again
        await again.aclose()
        await pool.aclose()
        assert all(use.client.is_closed for use in uses)

    asyncio.run(main())
