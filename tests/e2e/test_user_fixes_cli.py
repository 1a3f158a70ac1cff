"""What a new user hit at the terminal, each now showing the truth: a pack with web_search and
no working search backend is refused before the run (and `fabric doctor` says so), `fabric
packs` shows the model a run would really use, `fabric models` the context a run really gets,
config errors carry no pydantic "Value error," and point at the line to fix. Real `fabric`
processes, loopback servers only."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support import run_fabric

from fabric.testing import MockOpenAIServer, completion

RESEARCH = """\
version: 1
llm:
  backend: openai
  backends: {openai: {kind: openai, base_url: "http://127.0.0.1:9/v1"}}
  models: {default: mock}
  retry: {attempts: 1}
runs_dir: runs
packs:
  research:
    builder: packs.research:build
    sandbox: {network: true}
SEARCH"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def _searxng() -> Iterator[str]:
    """A loopback stand-in for a SearXNG instance: answers every GET with no results."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"query": "", "results": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _research_project(folder: Path, search_url: str | None) -> Path:
    search = f'    web: {{search: {{kind: searxng, url: "{search_url}"}}}}\n' if search_url else ""
    (folder / "fabric.yaml").write_text(RESEARCH.replace("SEARCH", search))
    (folder / "ws").mkdir(exist_ok=True)
    return folder


@pytest.mark.parametrize("search", ["unset", "not answering"])
def test_a_pack_whose_web_search_cannot_work_is_refused_before_the_run(
    tmp_path: Path, search: str
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}" if search == "not answering" else None
    folder = _research_project(tmp_path, url)
    with MockOpenAIServer([completion("never asked")]) as model:
        env = {**os.environ, "FABRIC_BASE_URL": model.base_url}
        argv = ("run", "--pack", "research", "--workspace", "ws", "--json", "what is fabric?")
        proc = run_fabric(*argv, cwd=folder, env=env)
        assert model.requests == []  # refused before the model was asked anything
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    if search == "unset":
        assert "packs.research.web.search is not set" in error["message"]
        assert "search: {kind: searxng, url:" in error["hint"]  # the fabric.yaml to add
    else:
        assert f"{url}/ does not answer" in error["message"]
        assert "packs.research.web.search.url" in error["hint"]
    assert not (folder / "runs").exists()  # nothing ran

    doctor = run_fabric("doctor", "--json", cwd=folder)
    [pack] = json.loads(doctor.stdout)["packs"]
    assert pack["web_search"]["ok"] is False
    assert pack["web_search"]["error"]["message"] == error["message"]
    text = run_fabric("doctor", cwd=folder).stdout
    assert "web_search NOT READY" in text and error["message"] in " ".join(text.split())


def test_a_pack_whose_search_backend_answers_runs(tmp_path: Path) -> None:
    with _searxng() as url:
        folder = _research_project(tmp_path, url)
        answer = completion(None, [("finish_task", {"answer": "none found", "citations": []})])
        with MockOpenAIServer([answer]) as model:
            env = {**os.environ, "FABRIC_BASE_URL": model.base_url}
            argv = ("run", "--pack", "research", "--workspace", "ws", "--json", "what is x?")
            proc = run_fabric(*argv, cwd=folder, env=env)
            asked = model.requests
        doctor = json.loads(run_fabric("doctor", "--json", cwd=folder).stdout)
    assert proc.returncode != 2, proc.stderr
    assert "web_search" in [t["function"]["name"] for t in asked[0]["tools"]]
    assert json.loads(proc.stdout)["runlog"]
    assert doctor["packs"][0]["web_search"] == {"ok": True, "url": f"{url}/"}


def test_packs_shows_the_model_a_run_would_really_use(tmp_path: Path) -> None:
    (tmp_path / "fabric.yaml").write_text(
        "llm:\n  backend: openai\n  models: {default: big-7b}\n  retry: {attempts: 1}\n"
        "packs:\n  reviewer:\n    builder: declarative\n    system_prompt: You review.\n"
        "    tools: [read_file]\n    finish_schema: {type: object}\n"
    )
    with MockOpenAIServer([], models=["small-1b"]) as model:  # big-7b is not there
        env = {**os.environ, "FABRIC_BASE_URL": model.base_url}
        listed = run_fabric("packs", "--json", cwd=tmp_path, env=env)
        text = run_fabric("packs", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["asks"] == "big-7b"
    assert (row["will_use"]["model"], row["will_use"]["backend"]) == ("small-1b", "openai")
    assert "a run now uses: small-1b on openai" in text.stdout
    assert "not big-7b: configured model big-7b is not on openai" in text.stdout


def _gguf(path: Path, context_length: int) -> Path:
    """A GGUF file with just a header: architecture, size label and context length."""

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()

    entries = [
        string("general.architecture") + struct.pack("<I", 8) + string("qwen2"),
        string("general.size_label") + struct.pack("<I", 8) + string("1.5B"),
        string("qwen2.context_length") + struct.pack("<I", 4) + struct.pack("<I", context_length),
    ]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries))
    return path


def test_models_shows_the_configured_context_beside_the_models_own(tmp_path: Path) -> None:
    model = _gguf(tmp_path / "tiny.gguf", 32768)
    (tmp_path / "fabric.yaml").write_text(
        "llm:\n  backend: embedded\n  backends:\n"
        f"    embedded: {{kind: embedded, model_path: {model}, context_size: 8192}}\n"
        "packs:\n  engineering: {builder: packs.engineering:build}\n"
    )
    listed = run_fabric("models", "--backend", "embedded", "--json", cwd=tmp_path)
    text = run_fabric("models", "--backend", "embedded", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [backend] = json.loads(listed.stdout)["backends"]
    [row] = backend["models"]
    assert (row["context_used"], row["context_length"]) == (8192, 32768)
    assert "8,192 ctx (max 32,768)" in text.stdout


def test_config_errors_carry_no_pydantic_prefix(tmp_path: Path) -> None:
    (tmp_path / "fabric.yaml").write_text(
        "llm:\n  backends:\n    mine:\n      kind: openai\n"
        '      base_url: "http://user:pw@127.0.0.1:1/v1"\n'
        "packs:\n  engineering: {builder: packs.engineering:build}\n"
    )
    for args in (("packs",), ("run", "--json", "x")):
        proc = run_fabric(*args, cwd=tmp_path)
        assert proc.returncode == 2
        assert "Value error" not in proc.stdout + proc.stderr
        assert "fabric.yaml:5: llm.backends.mine.base_url: a base_url must not hold" in (
            proc.stderr
        )


LINES = {
    "missing colon": ("llm:\n  backend openai\n  models: {default: m}\n", 2),
    "no space after a colon": ("packs:\n  e:\n    builder:engineering\n    model: x\n", 3),
    "quote never closed": ('packs:\n  e:\n    builder: "engineering\n    model: x\n', 3),
    "brace never closed": ("llm:\n  retry: {attempts: 1\npacks: {}\n", 2),
    "bad value after comments": (
        "llm:\n  # which backend a run uses:\n  # auto, or a name under backends\n\n"
        "  backend: olama\n",
        5,
    ),
    "bad item in a list": ("llm:\n  auto:\n    - ollama\n    - olama\n", 4),
    "bad value from an anchor": (
        "x-limits: &limits\n  max_steps: 0\npacks:\n  e:\n    builder: engineering\n"
        "    limits:\n      <<: *limits\n",
        2,
    ),
}


@pytest.mark.parametrize("case", sorted(LINES))
def test_config_errors_point_at_the_line_to_fix(tmp_path: Path, case: str) -> None:
    text, line = LINES[case]
    config = tmp_path / "fabric.yaml"
    config.write_text(text)
    proc = run_fabric("packs", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{config.name}:{line}:" in proc.stderr, proc.stderr
