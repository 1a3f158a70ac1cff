"""What fabric learns from an Ollama server, from ``/api/tags`` and ``/api/show`` payloads shaped
as Ollama sends them (several models: tool-capable, tool-incapable, embedding-only, too large,
tiny), and what happens when the server is not running: started when allowed and installed
(tested with a fake ``ollama`` executable, a real process on loopback), else one message saying
what to install or configure."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fabric.domain.errors import ModelConnectionError, ModelResponseError
from fabric.domain.models import ModelInfo
from fabric.infrastructure.llm import ollama_catalog
from fabric.infrastructure.llm.ollama import OllamaCatalog, parse_parameter_size

FIXTURES = Path(__file__).parent.parent / "fixtures" / "ollama"
BASE = "http://127.0.0.1:11434"


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def show_file(model: str) -> str:
    return "show_" + model.replace(":", "_") + ".json"


@pytest.mark.parametrize(
    ("text", "billions"),
    [
        ("8.0B", 8.0),
        ("500M", 0.5),
        ("1.5B", 1.5),
        ("70.6B", 70.6),
        ("1.2T", 1200.0),
        ("135M", 0.135),
        ("134.52M", 0.13452),
        ("3B", 3.0),
        ("7b", 7.0),
        ("8x7B", 56.0),
        ("8 x 22B", 176.0),
        ("", None),
        ("large", None),
        ("8.0", None),
        ("B", None),
        (None, None),
        (8, None),
    ],
)
def test_parameter_sizes_parse_to_billions(text: Any, billions: float | None) -> None:
    assert parse_parameter_size(text) == billions


Answer = Callable[[httpx.Request], httpx.Response]


def server(
    *, show: Callable[[str], httpx.Response] | None = None, tags: dict[str, Any] | None = None
) -> tuple[Answer, list[str]]:
    """A mock Ollama answering from the fixtures; records the models /api/show was asked for."""
    asked: list[str] = []

    def default_show(model: str) -> httpx.Response:
        return httpx.Response(200, json=load(show_file(model)))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/api/tags":
            return httpx.Response(200, json=tags or load("tags.json"))
        if request.method == "POST" and request.url.path == "/api/show":
            model = json.loads(request.content)["model"]
            asked.append(model)
            return (show or default_show)(model)
        return httpx.Response(404, text="404 page not found")

    return handler, asked


def listing(handler: Answer, **options: Any) -> list[ModelInfo]:
    options.setdefault("ensure_available", False)
    catalog = OllamaCatalog(
        name="ollama", base_url=BASE + "/", transport=httpx.MockTransport(handler), **options
    )
    assert catalog.backend == "ollama"
    return asyncio.run(catalog.list_models())


def by_name(models: list[ModelInfo]) -> dict[str, ModelInfo]:
    return {m.name: m for m in models}


def test_every_model_is_described_from_its_details() -> None:
    handler, asked = server()
    models = listing(handler)
    assert [m.name for m in models] == [m["name"] for m in load("tags.json")["models"]]
    assert sorted(asked) == sorted(m.name for m in models)
    got = by_name(models)
    assert got["qwen2.5-coder:7b"] == ModelInfo(
        name="qwen2.5-coder:7b",
        backend="ollama",
        tools=True,
        embedding_only=False,
        context_length=32768,
        parameters_b=7.6,
        family="qwen2",
        quantization="Q4_K_M",
    )
    assert got["llama3.1:8b"].tools is True
    assert got["llama3.1:8b"].parameters_b == 8.0
    assert got["llama3.1:8b"].context_length == 131072
    assert got["gemma:2b"].tools is False
    assert got["gemma:2b"].embedding_only is False
    assert got["gemma:2b"].context_length == 8192
    assert got["nomic-embed-text:latest"].embedding_only is True
    assert got["nomic-embed-text:latest"].tools is False
    assert got["nomic-embed-text:latest"].parameters_b == 0.137
    assert got["llama3.3:70b"].parameters_b == 70.6
    assert got["smollm2:135m"].parameters_b == 0.13452


def test_a_model_whose_details_fail_is_still_listed_with_what_tags_said() -> None:
    def show(model: str) -> httpx.Response:
        if model == "llama3.1:8b":
            return httpx.Response(500, json={"error": "failed to read model manifest"})
        if model == "gemma:2b":
            return httpx.Response(200, text="<html>proxy error</html>")
        return httpx.Response(200, json=load(show_file(model)))

    handler, _ = server(show=show)
    got = by_name(listing(handler))
    assert len(got) == 6
    llama = got["llama3.1:8b"]
    assert (llama.tools, llama.context_length) == (None, None)
    assert (llama.parameters_b, llama.family, llama.quantization) == (8.0, "llama", "Q4_K_M")
    assert got["gemma:2b"].tools is None
    assert got["qwen2.5-coder:7b"].tools is True


def test_a_server_without_capabilities_leaves_tools_unknown_but_spots_embedders() -> None:
    def old_show(model: str) -> httpx.Response:
        data = load(show_file(model))
        del data["capabilities"]
        return httpx.Response(200, json=data)

    tags = load("tags.json")
    tags["models"].append(
        {
            "name": "mxbai-embed-large:latest",
            "model": "mxbai-embed-large:latest",
            "details": {"family": "bert", "families": ["bert"], "parameter_size": "334M"},
        }
    )

    def show(model: str) -> httpx.Response:
        if model.startswith("mxbai"):
            return httpx.Response(404, json={"error": f"model '{model}' not found"})
        return old_show(model)

    handler, _ = server(show=show, tags=tags)
    got = by_name(listing(handler))
    assert got["qwen2.5-coder:7b"].tools is None
    assert got["gemma:2b"].tools is None
    assert got["qwen2.5-coder:7b"].context_length == 32768
    assert got["nomic-embed-text:latest"].embedding_only is True
    assert got["mxbai-embed-large:latest"].embedding_only is True
    assert got["mxbai-embed-large:latest"].parameters_b == 0.334
    assert not got["llama3.1:8b"].embedding_only


def test_size_comes_from_the_parameter_count_when_the_label_is_missing() -> None:
    def show(model: str) -> httpx.Response:
        data = load(show_file(model))
        data["details"]["parameter_size"] = ""
        return httpx.Response(200, json=data)

    tags = {"models": [{"name": "llama3.1:8b", "model": "llama3.1:8b"}]}
    handler, _ = server(show=show, tags=tags)
    (llama,) = listing(handler)
    assert llama.parameters_b == 8.03


def test_an_empty_server_lists_nothing() -> None:
    handler, asked = server(tags={"models": []})
    assert listing(handler) == []
    assert asked == []


def test_something_that_is_not_ollama_says_to_check_the_url() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="404 page not found")

    with pytest.raises(ModelResponseError, match="/api/tags") as caught:
        listing(handler)
    assert "without /v1" in caught.value.hint


# --- a server that is not running ----------------------------------------------------------


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


FAKE_OLLAMA = """\
#!{python}
# A stand-in for `ollama serve`: answers /api/version and /api/tags on OLLAMA_HOST.
import json, os, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if sys.argv[1:] != ["serve"]:
    sys.exit(2)
host, _, port = os.environ["OLLAMA_HOST"].rpartition(":")
with open(os.environ["FAKE_OLLAMA_PIDFILE"], "w") as f:
    f.write(str(os.getpid()))
TAGS = open(os.environ["FAKE_OLLAMA_TAGS"], "rb").read()

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = {{"/api/version": b'{{"version":"0.9.0"}}', "/api/tags": TAGS}}.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body or b"404 page not found")

    def do_POST(self):
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass

threading.Timer(120, os._exit, (0,)).start()  # never outlive a broken test run
print("fake ollama listening on", host, port, flush=True)
ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
"""


@pytest.fixture
def fake_ollama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fake ``ollama`` first on PATH; yields the file its pid is written to, and kills the
    process it becomes at the end of the test."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    binary = bin_dir / "ollama"
    binary.write_text(FAKE_OLLAMA.format(python=sys.executable), encoding="utf-8")
    binary.chmod(0o755)
    pidfile = tmp_path / "ollama.pid"
    tags = {"models": [load("tags.json")["models"][0]]}
    (tmp_path / "tags.json").write_text(json.dumps(tags), encoding="utf-8")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_OLLAMA_PIDFILE", str(pidfile))
    monkeypatch.setenv("FAKE_OLLAMA_TAGS", str(tmp_path / "tags.json"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield pidfile
    if pidfile.exists():
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGKILL)
        started = [p for p in ollama_catalog._STARTED if p.pid == pid]
        for process in started:  # reap it through its Popen, so Python knows it ended
            process.wait(10)
            ollama_catalog._STARTED.remove(process)
        if not started:
            os.waitpid(pid, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stopped_local_server_is_started_when_allowed(fake_ollama: Path, tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}"
    said: list[str] = []
    catalog = OllamaCatalog(
        name="ollama", base_url=base, ensure_available=True, timeout=5.0, on_status=said.append
    )
    models = asyncio.run(catalog.list_models())
    assert [m.name for m in models] == ["qwen2.5-coder:7b"]
    assert models[0].tools is None  # the fake has no /api/show: listed with what tags said
    assert models[0].parameters_b == 7.6
    pid = fake_ollama.read_text()
    (status,) = said
    assert f"started `ollama serve` (pid {pid}); it answered after" in status
    log = tmp_path / "cache" / "fabric" / "ollama-serve.log"
    assert str(log) in status
    assert "fake ollama listening on 127.0.0.1" in log.read_text()


def test_nothing_is_started_when_not_allowed(fake_ollama: Path) -> None:
    with pytest.raises(ModelConnectionError, match="Ollama is not running at") as caught:
        listing(refuse, ensure_available=False)
    assert "`ollama serve`" in caught.value.hint
    assert not fake_ollama.exists()


def test_a_server_on_another_machine_is_never_started(fake_ollama: Path) -> None:
    catalog = OllamaCatalog(
        name="ollama",
        base_url="http://gpu-box.lan:11434",
        ensure_available=True,
        timeout=5.0,
        transport=httpx.MockTransport(refuse),
    )
    with pytest.raises(ModelConnectionError, match=r"gpu-box\.lan") as caught:
        asyncio.run(catalog.list_models())
    assert "another machine" in caught.value.hint
    assert not fake_ollama.exists()


def test_without_ollama_installed_one_message_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ModelConnectionError) as caught:
        listing(refuse, ensure_available=True)
    error = caught.value
    assert f"Ollama is not running at {BASE}" in error.message
    assert "not installed" in error.message
    assert "https://ollama.com/download" in error.hint
    assert "ollama serve" in error.hint
    assert "--backend embedded" in error.hint
    assert "agent-fabric[local]" in error.hint


def test_a_started_server_that_exits_at_once_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    binary = bin_dir / "ollama"
    binary.write_text(
        f"#!{sys.executable}\nimport sys\nprint('Error: could not create directory')\n"
        "sys.exit(1)\n",
        encoding="utf-8",
    )
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    catalog = OllamaCatalog(
        name="ollama", base_url=f"http://127.0.0.1:{free_port()}", ensure_available=True
    )
    with pytest.raises(ModelConnectionError, match="exited at once") as caught:
        asyncio.run(catalog.list_models())
    assert "could not create directory" in caught.value.message
    assert "ollama-serve.log" in caught.value.hint
