"""Hostile input to `POST /tasks` on a real `fabric serve`: JSON nested too deep for a parser,
and workspaces no run may work in (a NUL in the path, the runs folder or a folder inside it,
the service's data folder, fabric's own folders, `/`, the home folder or one that contains it,
paths that cannot be resolved). Each gets a 4xx in the one error shape, saying what is wrong,
and nothing is written: no task record, no run folder. `fabric run --workspace` refuses the same
folders as a usage error (exit code 2), and still works in the config's own folder."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import run_fabric
from test_service import Service, error_shape, project, writer_then_finish

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.domain.errors import ConfigError
from fabric.interfaces.compose import build_runner
from fabric.testing import MockOpenAIServer


class Place:
    """The folders of the attack service: its project, and the home folder it runs with."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root, self.home = root, home


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Place]]:
    """A service that lets tasks work anywhere (workspace_roots: ['/']), its task records in
    a data folder of their own, and a home folder made for the test, so that only fabric's own
    workspace rules stand between a client and those folders."""
    root = tmp_path_factory.mktemp("attacked")
    home = tmp_path_factory.mktemp("home")
    for folder in (root / "runs" / "old", root / "data", home / ".cache" / "fabric",
                   home / ".config" / "fabric", home / "projects" / "app",
                   home / ".local" / "share" / "fabric"):  # fmt: skip
        folder.mkdir(parents=True)
    (root / "ws" / "runs-link").parent.mkdir()
    (root / "ws" / "runs-link").symlink_to(root / "runs")
    (root / "ws" / "loop").symlink_to(root / "ws" / "loop")
    env = {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
    }
    with MockOpenAIServer(writer_then_finish, models=["m"]) as model:
        config = project(
            root, model.base_url, workspace_roots=["/"], durable_database="data/t.sqlite3"
        )
        with Service(config, env=env) as service:
            yield service, Place(root, home)


def written(service: Service, place: Place) -> tuple[list[str], list[str]]:
    """The task ids the service lists, and the folders in its runs folder."""
    tasks = [t["id"] for t in service.client.get("/tasks").json()["tasks"]]
    return tasks, sorted(p.name for p in (place.root / "runs").iterdir())


def nested(depth: int) -> bytes:
    return b'{"pack": "reviewer", "task": "x", "model": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
def test_json_nested_too_deep_is_refused_before_parsing(
    attacked: tuple[Service, Place], depth: int
) -> None:
    service, place = attacked
    before = written(service, place)
    headers = {"Content-Type": "application/json"}
    answer = service.client.post("/tasks", content=nested(depth), headers=headers)
    error = error_shape(answer, 400, "body_too_deep")
    assert "32 levels deep" in error["message"]
    assert error["details"] == {"max_depth": 32}
    assert written(service, place) == before  # no task record, no run folder


def test_brackets_inside_strings_do_not_count_as_nesting(attacked: tuple[Service, Place]) -> None:
    service, place = attacked
    before = written(service, place)
    text = '[{"\\"[' * 2000  # quotes and escapes too: strings are skipped whole
    answer = service.client.post("/tasks", json={"pack": "nope", "task": text})
    error = error_shape(answer, 422)  # the unknown pack, not the nesting, is what is wrong
    assert "nope" in error["message"]
    assert written(service, place) == before  # no task record, no run folder


# (workspace given by the client, words the message must contain); "{root}" and "{home}" are
# filled in with the project's and the home folder's paths.
REFUSED = [
    ("ws/a\u0000b", "NUL character"),
    ("{root}/runs", "runlogs"),
    ("{root}/ws/../runs", "runlogs"),
    ("{root}/runs/old", "lies inside"),
    ("{root}/ws/runs-link", "runlogs"),  # a symlink to the runs folder
    ("{root}/data", "tasks and durable runs"),
    ("/", "filesystem root"),
    ("{home}", "your home folder"),
    ("~", "your home folder"),
    ("{home}/..", "contains"),
    ("{home}/.config/fabric", "API token"),
    ("{home}/.cache/fabric", "caches"),
    ("{home}/.local/share/fabric", "memories"),
    ("{root}/ws/loop", "cannot be used"),  # a symlink to itself
    ("{root}/ws/" + "n" * 300, "too long"),
    ("~no-such-user-d41d8", "home directory"),
]


@pytest.mark.parametrize(("workspace", "says"), REFUSED)
def test_a_workspace_no_run_may_use_is_refused(
    attacked: tuple[Service, Place], workspace: str, says: str
) -> None:
    service, place = attacked
    before = written(service, place)
    folder = workspace.format(root=place.root, home=place.home)
    answer = service.client.post(
        "/tasks", json={"pack": "reviewer", "task": "x", "workspace": folder}
    )
    error = error_shape(answer, 422, "config_error")
    assert says in error["message"]
    assert error["details"]["hint"]  # and what to do instead
    assert written(service, place) == before  # no task record, no run folder


def test_project_folders_stay_allowed(attacked: tuple[Service, Place]) -> None:
    """The config's own folder (the default workspace of `fabric run`) and folders in the home
    folder are fine."""
    service, place = attacked
    ids = [
        service.submit("reviewer", "check", workspace=str(folder))
        for folder in (place.root, place.home / "projects" / "app")
    ]
    finished = [service.wait_final(i) for i in ids]
    assert [r["status"] for r in finished] == ["completed", "completed"]
    assert [r["workspace"] for r in finished] == [str(place.root), str(place.home / "projects/app")]


# --- the same rules for `fabric run --workspace` ----------------------------------------------


def cli_project(folder: Path, model_url: str) -> Path:
    (folder / "runs").mkdir(exist_ok=True)
    path = project(folder, model_url)
    data: dict[str, Any] = json.loads(path.read_text())
    data["default_pack"] = "reviewer"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("workspace", "says"),
    [
        ("runs", "runlogs"),
        ("runs/x", "lies inside"),
        ("/", "filesystem root"),
        ("{home}", "your home folder"),
        ("ws/a\u0000b", "NUL character"),
    ],
)
def test_fabric_run_refuses_the_same_workspaces(tmp_path: Path, workspace: str, says: str) -> None:
    (tmp_path / "runs" / "x").mkdir(parents=True)
    with MockOpenAIServer(writer_then_finish, models=["m"]) as model:
        cli_project(tmp_path, model.base_url)
        folder = workspace.format(home=Path.home())
        if "\0" in folder:  # no command line can carry a NUL: call the runner as the CLI does
            result = _run_in_process(tmp_path, folder)
        else:
            result = run_fabric("run", "--workspace", folder, "look", cwd=tmp_path)
            assert result.returncode == 2, result.stderr
            result = result.stderr
    assert says in result
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["x"]  # no run folder
    assert model.requests == []


def _run_in_process(folder: Path, workspace: str) -> str:
    runner = build_runner(load_config(folder / "fabric.yaml"))
    with pytest.raises(ConfigError) as refused:
        asyncio.run(runner.run(RunRequest("reviewer", "look", workspace=Path(workspace))))
    return str(refused.value)


def test_fabric_run_still_works_in_the_config_folder(tmp_path: Path) -> None:
    with MockOpenAIServer(writer_then_finish, models=["m"]) as model:
        cli_project(tmp_path, model.base_url)
        result = run_fabric("run", "--json", "look", cwd=tmp_path, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "completed"
