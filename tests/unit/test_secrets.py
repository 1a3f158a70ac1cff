"""Secrets stay in: the redactor itself, and each place fabric writes or answers, attacked at
unit level (a provider echoing its key through httpx's MockTransport, a runlog line, an
artifact, a streamed reply on the terminal, stdout, the HTTP service's answers and logs)."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import structlog
import typer
from typer.testing import CliRunner

from fabric.config.loader import load_config
from fabric.config.schema import OpenAIBackend, SandboxSettings
from fabric.domain.errors import ModelAuthError, ModelError
from fabric.domain.models import ChatDelta, ChatRequest
from fabric.domain.secrets import REDACTED, Secrets, looks_secret
from fabric.infrastructure.llm.anthropic import AnthropicCatalog, AnthropicChatClient
from fabric.infrastructure.llm.backends import api_key
from fabric.infrastructure.llm.http_errors import status_error
from fabric.infrastructure.llm.openai_compat import OpenAICatalog, OpenAIChatClient
from fabric.infrastructure.runlog import JsonlRunLog
from fabric.infrastructure.tools.shell import scrubbed_env
from fabric.interfaces.cli.app import app as cli
from fabric.interfaces.cli.render import Progress, RedactingStream
from fabric.interfaces.cli.serve import configure_logging
from fabric.interfaces.http.app import create_app

KEY = "sk-unit/key+with=odd:chars-41f2"
TOKEN = "service-token-0123456789abcdef"


# --- the redactor ------------------------------------------------------------------------------


def test_every_form_of_a_secret_is_redacted_and_other_text_is_kept() -> None:
    secrets = Secrets([KEY, "short", "naïve-pässword"])
    text = (
        f"raw {KEY}; header Bearer {KEY}; url {quote(KEY, safe='')}; "
        f"json {json.dumps('naïve-pässword')}; json ascii {json.dumps('naïve-pässword')[1:-1]}"
    )
    assert secrets.redact(text) == (
        "raw [redacted]; header Bearer [redacted]; url [redacted]; "
        'json "[redacted]"; json ascii [redacted]'
    )
    assert secrets.redact("short words stay") == "short words stay"  # under 8 characters
    plain = "nothing secret here"
    assert secrets.redact(plain) is plain  # no copy when there is nothing to do


def test_the_longest_secret_wins_where_two_overlap() -> None:
    assert Secrets(["abcdefgh", "abcdefgh-ijkl"]).redact("x abcdefgh-ijkl y") == "x [redacted] y"


def test_secrets_come_from_secret_looking_names_and_named_key_variables() -> None:
    env = {
        "GITHUB_TOKEN": "ghp_0123456789abcdef",
        "MY_LLM": "llm-key-without-a-telling-name",  # named by a backend's api_key_env
        "HOME": "/home/someone",
        "DB_PASSWORD": "x",  # too short to matter
    }
    secrets = Secrets.from_env(env, ["MY_LLM", "UNSET"], also=[TOKEN])
    assert secrets.values == {"ghp_0123456789abcdef", "llm-key-without-a-telling-name", TOKEN}
    assert "ghp_" not in repr(secrets)
    assert not Secrets() and Secrets().redact(KEY) == KEY


def test_a_secret_looking_name_never_reaches_commands_even_past_the_config() -> None:
    # the config refuses such names already; the runtime rule holds even if one slips by
    env = scrubbed_env(
        SandboxSettings.model_construct(env_passthrough=["SOME_API_KEY", "PLAIN"]),
        {"PATH": "/usr/bin", "SOME_API_KEY": "k", "PLAIN": "p"},
    )
    assert "SOME_API_KEY" not in env and env["PLAIN"] == "p"


def test_redacted_json_stays_json_even_when_a_secret_looks_like_a_number() -> None:
    secrets = Secrets(["12345678"])
    line = json.dumps({"seq": 123456789, "text": "pin 12345678"}, separators=(",", ":"))
    assert json.loads(secrets.redact_json(line)) == {"seq": 123456789, "text": "pin [redacted]"}
    assert secrets.redact_obj({"a": ["pin 12345678", 1]}) == {"a": ["pin [redacted]", 1]}


def test_lines_cut_anywhere_are_redacted_whole() -> None:
    data = (json.dumps({"kind": "x", "text": f"key {KEY}"}) + "\n").encode() * 3
    chunks = [data[i : i + 7] for i in range(0, len(data), 7)]  # a secret split across chunks
    out = b"".join(Secrets([KEY]).redact_lines(chunks))
    assert KEY.encode() not in out
    assert [json.loads(line)["text"] for line in out.splitlines()] == [f"key {REDACTED}"] * 3


# --- provider errors, at the source ------------------------------------------------------------


URL = "http://llm.test/v1"


def _raised(client: Any) -> ModelError:
    """The model error a chat client's call, or a catalog's listing, raises."""

    async def call() -> None:
        if isinstance(client, OpenAICatalog | AnthropicCatalog):
            await client.list_models()
            return
        try:
            await client.chat(ChatRequest([{"role": "user", "content": "hi"}], []))
        finally:
            await client.aclose()

    with pytest.raises(ModelError) as caught:
        asyncio.run(call())
    return caught.value


def _refusing(body: str, status: int = 401) -> OpenAIChatClient:
    def answer(request: httpx.Request) -> httpx.Response:
        echoed = body.replace("{auth}", request.headers["Authorization"])
        return httpx.Response(status, text=echoed, headers={"content-type": "application/json"})

    transport = httpx.MockTransport(answer)
    return OpenAIChatClient(base_url=URL, model="m", api_key=KEY, transport=transport)


@pytest.mark.parametrize("status", [400, 401])
def test_a_provider_echoing_the_key_loses_it_in_the_error(
    monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    monkeypatch.setenv("FABRIC_API_KEY", KEY)
    body = json.dumps({"error": {"message": "bad credentials: {auth}", "sent": quote(KEY)}})
    error = _raised(_refusing(body, status))
    assert isinstance(error, ModelAuthError) == (status == 401)
    seen = f"{error} {error.body}"
    assert KEY not in seen and quote(KEY) not in seen and quote(KEY, safe="") not in seen
    assert "bad credentials: Bearer [redacted]" in str(error)


ACCESS = "MY_LLM_ACCESS"  # holds a key, but only the backend's api_key_env says so
CUSTOM_KEY = "llm-8f3a/custom+key=zz91"
ADAPTERS: dict[str, Callable[[str, httpx.MockTransport], Any]] = {
    "openai": lambda key, t: OpenAIChatClient(base_url=URL, model="m", api_key=key,
                                              transport=t),
    "openai streamed": lambda key, t: OpenAIChatClient(base_url=URL, model="m", api_key=key,
                                                       stream=True, transport=t),
    "openai models": lambda key, t: OpenAICatalog(name="o", base_url=URL, api_key=key,
                                                  transport=t),
    "anthropic": lambda key, t: AnthropicChatClient(base_url=URL, model="m", api_key=key,
        max_tokens=64, timeout=5, stream=False, transport=t),
    "anthropic streamed": lambda key, t: AnthropicChatClient(base_url=URL, model="m",
        api_key=key, max_tokens=64, timeout=5, transport=t),
    "anthropic models": lambda key, t: AnthropicCatalog(name="a", base_url=URL, api_key=key,
                                                        timeout=5, transport=t),
}  # fmt: skip


def _echoing_the_key(request: httpx.Request) -> httpx.Response:
    """Refuses with the key it got quoted raw (no "Bearer" before it) and URL-encoded: in a
    401 reply, or in an error event when a stream was asked for."""
    key = request.headers.get("x-api-key") or request.headers["authorization"][len("Bearer ") :]
    message = f"key {key} (sent as {quote(key, safe='')}) is not valid"
    error = {"type": "error", "error": {"type": "authentication_error", "code": 401,
                                        "message": message}}  # fmt: skip
    if request.content and json.loads(request.content).get("stream"):
        sse = f"event: error\ndata: {json.dumps(error)}\n\n"
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})
    return httpx.Response(401, json=error)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_adapter_redacts_its_own_key_from_a_variable_with_any_name(
    monkeypatch: pytest.MonkeyPatch, adapter: str
) -> None:
    assert not looks_secret(ACCESS)  # the environment's rule alone would miss this key
    monkeypatch.setenv(ACCESS, CUSTOM_KEY)
    key = api_key(OpenAIBackend(kind="openai", api_key_env=[ACCESS]))
    assert key == CUSTOM_KEY
    error = _raised(ADAPTERS[adapter](key, httpx.MockTransport(_echoing_the_key)))
    assert isinstance(error, ModelAuthError)
    seen = f"{error} {error.body}"
    assert CUSTOM_KEY not in seen and quote(CUSTOM_KEY, safe="") not in seen
    assert "key [redacted] (sent as [redacted]) is not valid" in str(error)


def test_an_unknown_bearer_token_and_a_json_escaped_key_are_redacted_too() -> None:
    body = json.dumps({"message": "got Bearer tok3n-fabric-never-heard-of for " + "\\u0073k-"})
    error = status_error(401, body, {}, model="m", server="s", secrets=Secrets())
    assert "tok3n" not in str(error) and "Bearer [redacted]" in str(error)
    escaped = '{"error": {"message": "key \\u0073k-escaped-key-123 refused"}}'
    error = status_error(
        403, escaped, {}, model="m", server="s", secrets=Secrets(["sk-escaped-key-123"])
    )
    assert "escaped-key" not in str(error)
    assert "Bearer authentication failed" in str(
        status_error(401, "Bearer authentication failed", {}, model="m", server="s")
    )


# --- the runlog --------------------------------------------------------------------------------


def test_runlog_lines_artifacts_and_observers_hold_no_secret(tmp_path: Path) -> None:
    seen: list[Mapping[str, Any]] = []
    log = JsonlRunLog(tmp_path, "r1", seen.append, secrets=Secrets([KEY, "12345678"]))
    log.emit("tool_result", {"output": f"OPENAI_API_KEY={KEY}\n", "nested": {"k": [KEY]}})
    # the secret in a number makes the line go through decode-redact-encode, lone surrogate too
    log.emit("llm_response", {"message": {"content": "a\ud800 pin 12345678"}, "step": 123456789})
    ref = log.save_artifact("out.txt", f"full output {KEY}")
    log.close()
    data = (tmp_path / "r1" / "runlog.jsonl").read_text()
    assert KEY not in data and KEY not in (tmp_path / "r1" / ref).read_text()
    lines = [json.loads(line) for line in data.splitlines()]
    assert lines[0]["output"] == "OPENAI_API_KEY=[redacted]\n"
    assert lines[1]["message"]["content"] == "a\ud800 pin [redacted]"
    assert lines[1]["step"] == 123456789
    assert seen == lines  # observers (live progress, SSE wake-ups) get what the log holds

    reopened = JsonlRunLog.reopen(tmp_path / "r1" / "runlog.jsonl", secrets=Secrets([KEY]))
    reopened.emit("note", {"text": KEY})
    reopened.close()
    assert KEY not in (tmp_path / "r1" / "runlog.jsonl").read_text()


# --- the CLI -----------------------------------------------------------------------------------


def test_a_secret_streamed_in_pieces_never_shows_on_the_terminal() -> None:
    out = io.StringIO()
    progress = Progress(out, live=True, secrets=Secrets([KEY]))
    progress.event({"kind": "llm_request", "step": 1})
    for piece in ("The key is ", KEY[:5], KEY[5:14], KEY[14:], " ok"):
        progress.delta(ChatDelta(text=piece))
        assert not any(KEY[:n] in out.getvalue() for n in range(3, len(KEY)))
    assert out.getvalue().endswith("model: The key is [redacted] ok")


def test_stdout_through_click_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", RedactingStream(out, Secrets([KEY])))
    typer.echo(json.dumps({"key": KEY}))
    print(f"Bearer {KEY}")
    assert out.getvalue() == '{"key": "[redacted]"}\nBearer [redacted]\n'


def test_fabric_show_redacts_an_old_runlog(tmp_path: Path) -> None:
    secret = "ghp_unit0123456789abcdef"
    runlog = tmp_path / "runlog.jsonl"
    event = {"v": 2, "seq": 0, "ts": "2026-01-01T00:00:00Z", "run_id": "r", "kind": "run_started",
             "pack": "p", "task": f"use {secret}"}  # fmt: skip
    runlog.write_text(json.dumps(event) + "\n")
    for args in (["show", str(runlog)], ["show", "--json", str(runlog)]):
        result = CliRunner().invoke(cli, args, env={"GITHUB_TOKEN": secret})
        assert "use [redacted]" in result.output
        assert secret not in result.output


# --- the HTTP service --------------------------------------------------------------------------


def test_the_service_answers_without_its_token_even_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FABRIC_API_TOKEN", raising=False)  # the token came from its file
    (tmp_path / "ws").mkdir()
    (tmp_path / "fabric.yaml").write_text(
        "version: 1\nruns_dir: runs\n"
        "serve: {workspace_roots: [ws], allowed_hosts: [testserver]}\n"
        "packs:\n  p: {builder: declarative, system_prompt: x, tools: [read_file],\n"
        "      finish_schema: {type: object}}\n"
    )
    service = create_app(load_config(tmp_path / "fabric.yaml"), token=TOKEN)

    async def ask() -> list[httpx.Response]:
        transport = httpx.ASGITransport(service)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers=headers
        ) as client:
            return [
                await client.post("/tasks", json={"pack": f"p-{TOKEN}", "task": "hi"}),
                await client.get("/tasks", headers={"Host": f"{TOKEN}.example"}),
            ]

    unknown, wrong_host = asyncio.run(ask())
    assert unknown.status_code == 422
    assert unknown.json()["error"]["message"].startswith("no pack named 'p-[redacted]'")
    assert wrong_host.status_code == 400
    assert "[redacted].example" in wrong_host.json()["error"]["message"]
    for answer in (unknown, wrong_host):
        assert TOKEN not in answer.text
        assert int(answer.headers["content-length"]) == len(answer.content)


def test_the_service_log_lines_hold_no_secret(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(Secrets([TOKEN, KEY]))
    try:
        structlog.get_logger("t").info("seen", auth=f"Bearer {TOKEN}", ids=[KEY, "kept"])
    finally:
        structlog.reset_defaults()
    line = json.loads(capsys.readouterr().err)
    assert line["auth"] == "Bearer [redacted]" and line["ids"] == ["[redacted]", "kept"]
