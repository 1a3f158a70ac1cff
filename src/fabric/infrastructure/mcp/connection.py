"""One MCP server for one run: started (within ``start_timeout``), its tools listed page by
page to the end, called (within ``call_timeout``), told to stop when the run ends.

The SDK's ``Client`` lives in a task of its own (its context must be entered and left in one
task); calls come from the run's task. A list of tools the server says has changed
(``notifications/tools/list_changed`` on the older protocol revisions, a
``subscriptions/listen`` event on 2026-07-28) is fetched again before the next call. A server
that stops during a call fails that call with its last words on stderr and is started again,
once a run; a second crash leaves its tools failing for the rest of the run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from fabric.config.schema import McpServerSettings
from fabric.domain.errors import McpError

from .names import printable
from .transports import Place, http_transport, stdio_transport

MAX_PAGES = 100
MAX_TOOLS = 500
STDERR_TAIL = 1_500
_STOP_GRACE = 10.0
_log = logging.getLogger(__name__)

Note = Callable[[str, Mapping[str, Any]], None]
"""Told of what happens to a server during a run (a crash, a restart, a changed list); by
default fabric's log (the runlog has the failed tool results)."""


class _SdkLogs(logging.Handler):
    """The SDK's own log records as one debug line each in fabric's log: left alone, a stdio
    client prints a whole traceback for every stray line a server writes to stdout."""

    def emit(self, record: logging.LogRecord) -> None:
        _log.debug("mcp sdk: %s", record.getMessage().splitlines()[0][:300])


def quiet_sdk_logs() -> None:
    sdk = logging.getLogger("mcp")
    if not any(isinstance(h, _SdkLogs) for h in sdk.handlers):
        sdk.addHandler(_SdkLogs())
        sdk.propagate = False


class McpConnection:
    """A running MCP server and what it offers."""

    def __init__(
        self, name: str, settings: McpServerSettings, place: Place, note: Note | None = None
    ) -> None:
        self.name, self.settings, self.place = name, settings, place
        self._note = note or _log_note
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stderr: TextIO | None = None
        self._stale = False
        self._restarts = 0
        self._broken: str | None = None
        self.tools: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.protocol: str | None = None
        self.started_ms = 0.0

    async def start(self) -> None:
        """Start the server and list its tools, or raise McpError saying why it could not."""
        quiet_sdk_logs()
        began = time.perf_counter()
        self._stop = asyncio.Event()
        # the server's stderr, read back for error messages; closed in aclose
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp-{self.name}")
        limit = self.settings.start_timeout
        try:
            async with asyncio.timeout(limit):
                self._client = await asyncio.shield(ready)
                self.protocol = str(self._client.protocol_version)
                await self._list()
        except TimeoutError:
            tail = self._tail()
            await self.aclose()
            raise McpError(
                f"MCP server {self.name!r} did not start and list its tools within {limit:g} s"
                f"{tail}",
                hint=f"check that it starts (`fabric mcp list`), or raise "
                f"mcp_servers.{self.name}.start_timeout",
            ) from None
        except McpError:
            await self.aclose()
            raise
        except Exception as exc:
            tail = self._tail()
            await self.aclose()
            raise McpError(
                f"MCP server {self.name!r} did not start: {_reason(exc)}{tail}",
                hint=f"run the server's command by hand to see why, fix mcp_servers.{self.name} "
                "in fabric.yaml, then check with `fabric mcp list`",
            ) from None
        self.started_ms = round((time.perf_counter() - began) * 1000, 3)

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        """The client's task: connect, hand the client over, follow list changes, and leave
        when told to stop."""
        from mcp import Client
        from mcp_types import Implementation

        import fabric

        if self.settings.transport == "stdio":
            assert self._stderr is not None
            transport = stdio_transport(self.name, self.settings, self.place, self._stderr)
        else:
            transport = http_transport(self.name, self.settings)
        listening: asyncio.Task[None] | None = None
        try:
            async with Client(
                transport,
                mode=self.settings.protocol,
                message_handler=self._on_message,
                client_info=Implementation(name="fabric", version=fabric.__version__),
                cache=None,
            ) as client:
                if not str(client.protocol_version).startswith("2025"):
                    listening = asyncio.create_task(self._listen(client))
                ready.set_result(client)
                await self._stop.wait()
                if listening is not None:
                    listening.cancel()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpError(str(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                _log.debug("MCP server %s: connection ended: %s", self.name, _reason(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _listen(self, client: Any) -> None:
        """2026-07-28: changes to the tool list come as events of a listen stream."""
        with contextlib.suppress(Exception):
            async with client.listen(tools_list_changed=True) as events:
                async for _event in events:
                    self._changed()

    async def _on_message(self, message: Any) -> None:
        """Older revisions: ``notifications/tools/list_changed``."""
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/tools/list_changed":
            self._changed()

    def _changed(self) -> None:
        self._stale = True
        self._note("mcp_server", {"server": self.name, "event": "tools_changed"})

    async def _list(self) -> None:
        """Every page of ``tools/list``, within bounds a hostile server cannot stretch."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            page = await self._client.list_tools(cursor=cursor)
            tools += [
                t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools
            ]
            cursor = page.next_cursor
            if not cursor or len(tools) >= MAX_TOOLS:
                break
            if cursor in seen:
                self.problems.append("its tool list repeated a page cursor; listing stopped")
                break
            seen.add(cursor)
        else:
            self.problems.append(f"its tool list went on past {MAX_PAGES} pages; listing stopped")
        if len(tools) > MAX_TOOLS:
            self.problems.append(f"it offers more than {MAX_TOOLS} tools; the rest left out")
        self.tools = tools[:MAX_TOOLS]
        self._stale = False

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Call ``tool`` and return its result (a ``CallToolResult`` as JSON, by alias)."""
        if self._broken is not None:
            raise McpError(self._broken, hint="start a new run once the server is fixed")
        if self._stale:
            await self.refresh()
        if not any(t.get("name") == tool for t in self.tools):
            raise McpError(
                f"MCP server {self.name!r} no longer offers the tool {printable(tool)!r}",
                hint="its tool list changed during the run; use another tool",
            )
        limit = self.settings.call_timeout
        try:
            async with asyncio.timeout(limit):
                result = await self._client.call_tool(tool, dict(arguments))
        except TimeoutError:
            raise McpError(
                f"MCP server {self.name!r} did not answer the call of {printable(tool)!r} "
                f"within {limit:g} s; the call was cancelled",
                hint=f"try a smaller request, or raise mcp_servers.{self.name}.call_timeout",
            ) from None
        except Exception as exc:
            if self._task is not None and (self._task.done() or _closed(exc)):
                await self._crashed(tool)
            raise McpError(
                f"MCP server {self.name!r} failed the call of {printable(tool)!r}: {_reason(exc)}",
                hint="check the arguments against the tool's schema, or use another tool",
            ) from None
        return dict(result.model_dump(mode="json", by_alias=True, exclude_none=True))

    @property
    def stale(self) -> bool:
        """Whether the server said its tools changed since they were last listed."""
        return self._stale

    async def refresh(self) -> None:
        """List the tools again (McpError when the server does not)."""
        try:
            await asyncio.wait_for(self._list(), self.settings.start_timeout)
        except Exception as exc:
            raise McpError(
                f"MCP server {self.name!r} said its tools changed but did not list them again: "
                f"{_reason(exc)}",
                hint="call again, or use another tool",
            ) from None

    async def _crashed(self, tool: str) -> None:
        tail = self._tail()
        event: dict[str, Any] = {"server": self.name, "event": "crashed", "tool": tool}
        if tail:
            event["stderr"] = tail.strip()
        self._note("mcp_server", event)
        await self.aclose()
        if self._restarts >= 1:
            self._broken = (
                f"MCP server {self.name!r} stopped during a call for the second time in this "
                f"run{tail}; fabric does not start it again in this run"
            )
            raise McpError(self._broken, hint="its tools fail for the rest of this run; fix it")
        self._restarts += 1
        try:
            await self.start()
        except McpError as exc:
            self._broken = (
                f"MCP server {self.name!r} stopped and did not start again: {exc.message}"
            )
            raise McpError(self._broken, hint=exc.hint) from None
        self._stale = True  # listed again at the next step: the set may differ after a restart
        self._note("mcp_server", {"server": self.name, "event": "restarted"})
        raise McpError(
            f"MCP server {self.name!r} stopped during the call of {printable(tool)!r}{tail}; "
            "fabric started it again",
            hint="call the tool again if doing it twice is safe; the server lost what it "
            "held in memory",
        )

    def _tail(self) -> str:
        """The server's last words on stderr, for an error message."""
        if self._stderr is None or self._stderr.closed:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.flush()
            size = self._stderr.seek(0, 2)
            self._stderr.seek(max(0, size - STDERR_TAIL * 4))
            text = self._stderr.read()[-STDERR_TAIL:].strip()
            if text:
                return f" (its stderr ends: {text})"
        return ""

    async def aclose(self) -> None:
        """Tell the server to stop and wait for it (bounded)."""
        self._stop.set()
        task, self._task, self._client = self._task, None, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), _STOP_GRACE)
            except (TimeoutError, asyncio.CancelledError, Exception):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self._stderr is not None:
            self._stderr.close()


def _log_note(kind: str, data: Mapping[str, Any]) -> None:
    _log.info("%s: %s", kind, dict(data))


def _closed(exc: BaseException) -> bool:
    from mcp_types.jsonrpc import CONNECTION_CLOSED

    return getattr(exc, "code", None) == CONNECTION_CLOSED or "closed" in type(exc).__name__.lower()


def _reason(exc: BaseException) -> str:
    """One line for an exception, an exception group's first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(getattr(exc, "message", "") or exc).splitlines()
    return printable(f"{type(exc).__name__}: {text[0] if text else ''}", 400)
