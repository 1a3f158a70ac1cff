"""What a new user hit over HTTP, each now showing the truth: a task shows the model its run
used (not `model: null`), `GET /packs` the model a task would use, a task for a pack whose
web_search cannot work is refused at submission, and a 422 carries no pydantic "Value error,"
prefix. A real `fabric serve` on loopback (and, for the 422, the app in process, with a route
whose validator raises ValueError: no endpoint of fabric's own has one yet)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, field_validator
from test_service import TOKEN, Service, error_shape, project, writer_then_finish

from fabric.config.loader import load_config
from fabric.interfaces.http.app import create_app
from fabric.testing import MockOpenAIServer


def _with_research(folder: Path, model_url: str, search_url: str | None) -> Path:
    """The test project in ``folder``, plus a research pack (with a search backend at
    ``search_url``, if given); returns its config."""
    folder.mkdir()
    config = project(folder, model_url)
    data: dict[str, Any] = json.loads(config.read_text("utf-8"))
    research: dict[str, Any] = {"builder": "packs.research:build", "sandbox": {"network": True}}
    if search_url:
        research["web"] = {"search": {"kind": "searxng", "url": search_url}}
    data["packs"]["research"] = research
    config.write_text(json.dumps(data, indent=1))
    return config


def test_a_task_shows_the_model_its_run_used(tmp_path: Path) -> None:
    # the config asks for model "m"; the server has only "mock", so the run uses "mock"
    with (
        MockOpenAIServer(writer_then_finish, models=["mock"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        packs = {p["name"]: p for p in service.client.get("/packs").json()["packs"]}
        task_id = service.submit("reviewer", "look")
        done = service.wait_final(task_id)
        listed = service.client.get("/tasks").json()["tasks"]
    assert done["status"] == "completed", done
    assert (done["model"], done["backend"]) == ("mock", "openai")
    assert [(t["id"], t["model"]) for t in listed] == [(task_id, "mock")]
    assert packs["reviewer"]["will_use"]["model"] == "mock"
    assert "configured model m is not on openai" in packs["reviewer"]["will_use"]["reason"]


def test_a_task_whose_web_search_cannot_work_is_refused_at_submission(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with MockOpenAIServer(writer_then_finish, models=["m"]) as model:
        unset = _with_research(tmp_path / "unset", model.base_url, None)
        with Service(unset) as service:
            answer = service.client.post("/tasks", json={"pack": "research", "task": "x"})
            error = error_shape(answer, 422, "config_error")
            assert "packs.research.web.search is not set" in error["message"]
            assert "search: {kind: searxng" in error["details"]["hint"]
            assert service.client.get("/tasks").json()["tasks"] == []
        down = _with_research(tmp_path / "down", model.base_url, closed)
        with Service(down) as service:
            answer = service.client.post("/tasks", json={"pack": "research", "task": "x"})
            error = error_shape(answer, 503, "search_unavailable")
            assert f"{closed}/ does not answer" in error["message"]
            assert service.client.get("/tasks").json()["tasks"] == []
        assert model.requests == []


class _Picky(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def _not_admin(cls, name: str) -> str:
        if name == "admin":
            raise ValueError("the name admin is taken; pick another")
        return name


def test_a_422_says_what_the_validator_said_without_a_prefix(tmp_path: Path) -> None:
    config = project(tmp_path, "http://127.0.0.1:9/v1")
    data = json.loads(config.read_text())
    data["serve"]["allowed_hosts"] = ["testserver"]
    data["serve"]["token_file"] = str(tmp_path / "token")
    config.write_text(json.dumps(data))
    app = create_app(load_config(config), token=TOKEN)

    @app.post("/picky")
    async def picky(body: _Picky) -> dict[str, str]:
        return {"name": body.name}

    async def ask() -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://testserver",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as client:
            return await client.post("/picky", json={"name": "admin"})

    error = error_shape(asyncio.run(ask()), 422, "invalid_request")
    assert error["details"] == [
        {"loc": ["body", "name"], "message": "the name admin is taken; pick another"}
    ]
