"""What the console's live tests share: a real ``fabric serve`` (the e2e tests' ``Service``: a
child process on a free loopback port with the token in its environment) whose model is a
scripted loopback OpenAI-compatible server, and the page logged in to it through its login view.

The model answers each run by the script of a tag its task text holds (``model.script("#live",
...)``: the reply to its first call, its second, ...; then it finishes). A test can hold a
reply until it says so (``model.hold("#live", call)``) to look at a run mid-way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
from e2e.test_service import GUARD, TOKEN, Service, project

from fabric.testing import MockOpenAIServer, completion, stream_chunks

from .conftest import Tab

Reply = dict[str, Any] | tuple[int, Any] | Callable[[dict[str, Any]], Any]
"""A completion body (answered 200), a (status, body) pair, or a function of the request body
that returns either."""
SUMMARY = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}
VIEWPORT = {"width": 1280, "height": 800}


def finish(summary: str) -> dict[str, Any]:
    return completion(None, [("finish_task", {"summary": summary})])


def call_of(body: dict[str, Any]) -> int:
    """Which model call of its run a request is (0-based): the model's replies so far."""
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def last_tool_output(body: dict[str, Any]) -> str:
    """What the model was last told by a tool (the refusal of a denied call, a file read)."""
    return str(next(m["content"] for m in reversed(body["messages"]) if m["role"] == "tool"))


@dataclass
class Hold:
    """A model call held back: ``reached`` once it came, answered once ``release()``d."""

    reached: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.go.set()

    def wait_reached(self) -> None:
        assert self.reached.wait(GUARD), "the model call never came"


_MID_STREAM = "_hold_mid_stream"


def _says(chunk: dict[str, Any]) -> bool:
    """Whether a streamed chunk carries text of the reply."""
    return bool(chunk["choices"]) and bool(chunk["choices"][0]["delta"].get("content"))


class _PausingServer(MockOpenAIServer):
    """A ``MockOpenAIServer`` that can stop a streamed reply after its text, until released
    (a reply that carries a ``Hold`` under ``_MID_STREAM``)."""

    def _request_handler(self) -> type[BaseHTTPRequestHandler]:
        base: Any = super()._request_handler()

        class Handler(base):  # type: ignore[misc,valid-type]
            def _send_stream(self, answer: dict[str, Any]) -> None:
                held: Hold | None = answer.pop(_MID_STREAM, None)
                if held is None:
                    super()._send_stream(answer)
                    return
                chunks = stream_chunks(answer)
                cut = 1 + max(i for i, c in enumerate(chunks) if _says(c))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")  # the end of the body: the close
                self.end_headers()
                for chunk in chunks[:cut]:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                held.reached.set()
                if held.go.wait(GUARD * 4):
                    for chunk in chunks[cut:]:
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        return Handler


class ScriptedModel:
    """The loopback model: a ``MockOpenAIServer`` whose handler picks the script by tag."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Reply]] = {}
        self.holds: dict[tuple[str, int], Hold] = {}
        self.mid_stream: dict[tuple[str, int], Hold] = {}
        self.server = _PausingServer(self.answer, models=["m"])

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def script(self, tag: str, *replies: Reply) -> str:
        """Replies to the model calls of runs whose task holds ``tag``; returns the tag."""
        self.scripts[tag] = list(replies)
        return tag

    def hold(self, tag: str, call: int) -> Hold:
        """Hold the model call ``call`` (0-based) of the runs of ``tag`` until released."""
        held = self.holds[(tag, call)] = Hold()
        return held

    def hold_mid_stream(self, tag: str, call: int) -> Hold:
        """Stream the reply to model call ``call`` of the runs of ``tag`` up to the end of its
        text, and the rest (its tool calls, its end) once released."""
        held = self.mid_stream[(tag, call)] = Hold()
        return held

    def answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        task = str(next(m["content"] for m in body["messages"] if m["role"] == "user"))
        tags = sorted((t for t in self.scripts if t in task), key=len, reverse=True)
        tag = tags[0] if tags else ""
        call = call_of(body)
        held = self.holds.get((tag, call))
        if held is not None:
            held.reached.set()
            assert held.go.wait(GUARD * 4), "the test never let the model go"
        replies = self.scripts.get(tag, [])
        reply = replies[call] if call < len(replies) else finish(f"done: {task}")
        if callable(reply):
            reply = reply(body)
        if (tag, call) in self.mid_stream and isinstance(reply, dict):
            reply = {**reply, _MID_STREAM: self.mid_stream[(tag, call)]}
        return reply if isinstance(reply, tuple) else (200, reply)

    def release_all(self) -> None:
        for held in [*self.holds.values(), *self.mid_stream.values()]:
            held.release()

    def __enter__(self) -> ScriptedModel:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_all()
        self.server.__exit__(*exc)


def config(folder: Path, model_url: str, packs: dict[str, Any] | None = None) -> Path:
    """The e2e tests' project (``project()``) with the console tests' packs added: ``writer``
    (reads and writes files), ``asker`` (every write_file waits for a person) and
    ``packs``."""
    path = project(folder, model_url)
    data = json.loads(path.read_text("utf-8"))
    data["packs"] |= {
        "writer": {
            "builder": "declarative",
            "description": "Writes and reads files in its workspace.",
            "system_prompt": "You write files.",
            "tools": ["read_file", "write_file", "list_files"],
            "finish_schema": SUMMARY,
        },
        "asker": {
            "builder": "declarative",
            "description": "Asks a person before it writes a file.",
            "system_prompt": "You ask first.",
            "tools": ["write_file"],
            "finish_schema": SUMMARY,
            "sandbox": {"policy": {"rules": [{"tool": "write_file", "verdict": "ask"}]}},
        },
        **(packs or {}),
    }
    path.write_text(json.dumps(data, indent=1), "utf-8")
    return path


def service_env(folder: Path) -> dict[str, str]:
    """What ``fabric serve`` and ``fabric run`` get besides the test's environment: a home of
    their own (the run ledger lives there) and this checkout's sources first."""
    home = folder / "home"
    home.mkdir(exist_ok=True)
    root = Path(__file__).parents[2]
    first = (str(root / "src"), str(root), os.environ.get("PYTHONPATH", ""))
    path = os.pathsep.join(p for p in first if p)
    return {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "PYTHONPATH": path}


@dataclass
class Live:
    """A running service, its model and its project folder."""

    service: Service
    model: ScriptedModel
    folder: Path

    @property
    def url(self) -> str:
        return self.service.url

    @property
    def workspace(self) -> Path:
        return self.folder / "ws"

    def workspace_of(self, tag: str) -> str:
        """A workspace of the tag's own beneath the service's workspace root (the service runs
        one task at a time in a workspace: a test's held run never keeps another's waiting);
        its name, as ``POST /tasks`` takes it."""
        name = tag.strip("#")
        (self.workspace / name).mkdir(exist_ok=True)
        return name

    def submit(self, pack: str, task: str, tag: str, **fields: Any) -> str:
        """``POST /tasks`` of ``task`` and ``tag`` in the tag's workspace; the task's id."""
        return self.service.submit(
            pack, f"{task} {tag}", workspace=self.workspace_of(tag), **fields
        )

    def cli_run(self, pack: str, task: str, tag: str) -> dict[str, Any]:
        """``fabric run TASK --json`` with the service's config, in another process, in the
        tag's workspace."""
        workspace = self.workspace / self.workspace_of(tag)
        done = subprocess.run(
            [sys.executable, "-m", "fabric", "run", f"{task} {tag}", "--pack", pack,
             "--config", str(self.service.config), "--workspace", str(workspace), "--json"],
            env=self.service.env, cwd=self.folder, capture_output=True, text=True, timeout=GUARD,
        )  # fmt: skip
        assert done.stdout, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result


class RestartedService(Service):
    """``fabric serve`` started again, on the port of ``old`` (which died): a page left open
    on the old one finds the new one where it was."""

    def __init__(self, old: Service) -> None:
        super().__init__(old.config, env=old.env)
        self.client.close()
        self.port, self.url = old.port, old.url
        self.log_path = old.log_path.with_name(f"serve-{old.port}-again.log")
        self.client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=GUARD
        )


@contextmanager
def live_service(folder: Path, packs: dict[str, Any] | None = None) -> Iterator[Live]:
    """A scripted model and ``fabric serve`` on it (the config of ``config()``)."""
    folder.mkdir(parents=True, exist_ok=True)
    with ScriptedModel() as model:
        path = config(folder, model.base_url, packs)
        with Service(path, env=service_env(folder)) as service:
            yield Live(service, model, folder)


def live_tab(tab: Callable[..., Tab], **options: Any) -> Tab:
    """A 1280x800 page (``tab()``) that waits up to 30 s for what it is told to wait for: a
    guard against a hang on a busy machine, never a measure of speed."""
    opened = tab(viewport=VIEWPORT, **options)
    opened.page.set_default_timeout(GUARD * 1000)
    return opened


@dataclass
class Shared:
    """A run's share file as the run page downloads it, opened from disk with the network off:
    the page showing it, the file, its suggested name, and every URL the page asked for."""

    offline: Tab
    saved: Path
    suggested: str
    asked: list[str]


def open_shared(tab: Callable[..., Tab], run_page: Tab, saved: Path) -> Shared:
    """Download the share file from ``run_page`` to ``saved`` and open it offline, once its
    timeline has its end."""
    with run_page.page.expect_download() as download:
        run_page.page.click("#download-html")
    download.value.save_as(saved)
    offline = live_tab(tab, offline=True)
    asked: list[str] = []
    offline.page.on("request", lambda request: asked.append(request.url))
    offline.page.goto(saved.as_uri())
    offline.page.wait_for_selector(".item.finished")
    return Shared(offline, saved, download.value.suggested_filename, asked)


def open_console(tab: Callable[..., Tab], url: str, route: str = "#/runs") -> Tab:
    """A page (``live_tab``) on the console's ``route``, logged in through its login view."""
    opened = live_tab(tab)
    page = opened.page
    page.goto(f"{url}/console/{route}")
    page.wait_for_selector("main#view[data-view=login][data-state=ready]")
    page.fill("#token", TOKEN)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("main#view[data-state=ready]:not([data-view=login])")
    return opened


def screenshot(opened: Tab, name: str) -> None:
    """``console-<name>.png`` of the page, only when ``FABRIC_SCREENSHOTS`` names a folder."""
    folder = os.environ.get("FABRIC_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        opened.page.screenshot(path=str(Path(folder) / f"console-{name}.png"))
