"""Packs from installed distributions (entry points ``fabric.packs``), with a real wheel
installed by pip into a virtualenv of its own: listed with their origin, run by name, given
settings by a config, a broken one told without stopping the rest; and what a run could have
planted in a folder on the import path (a ``*.dist-info``, a ``.pth``, a module of the same
name as the installed pack's) never loads."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support import line_of, mock_llm, run_fabric, write

from fabric.testing import MockOpenAIServer, completion

LINTPACK = '''\
"""A pack an installed distribution declares."""

from pydantic import Field

from fabric.sdk import Pack, PackSettings, library_tools


class LintSettings(PackSettings):
    description: str = Field("Lints the files a task names.", description="Shown by packs.")
    strict: bool = Field(False, description="Report style problems too.")


def build(settings: LintSettings) -> Pack:
    return Pack(
        name="lint",
        description=settings.description,
        system_prompt="You lint files." + (" Be strict." if settings.strict else ""),
        tools=library_tools("read_file"),
        finish_schema={"type": "object", "required": ["problems"],
                       "properties": {"problems": {"type": "array", "items": {"type": "string"}}}},
        sandbox=settings.sandbox,
    )
'''
ENTRY_POINTS = "[fabric.packs]\nlint = fabric_lintpack:build\nbroken = fabric_lintpack:missing\n"
DEV_FINDER = """\
import importlib.util, sys

class _Finder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "fabric_devpack":
            return importlib.util.spec_from_file_location(name, {path!r})
        return None

def install():
    sys.meta_path.append(_Finder)
"""
"""What setuptools' editable install puts in site-packages: a finder that maps the package to
its project folder, installed by a .pth."""
PLANTED = (
    "import pathlib\npathlib.Path({mark!r}).write_text('imported')\n\ndef build(s):\n    pass\n"
)


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A wheel as a build backend makes it: the files, METADATA, WHEEL, RECORD."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = hashlib.sha256(text.encode()).digest()
        encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        record.append(f"{path},sha256={encoded},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _virtualenv(folder: Path) -> Path:
    """A virtualenv with this one's packages (linked in, no download) and its own
    site-packages; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python*/site-packages"))
    ours = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    for entry in ours.iterdir():
        if entry.name != "__pycache__":
            (site / entry.name).symlink_to(entry)
    return folder / "bin" / "python"


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv where pip installed ``fabric-lintpack 1.0.0`` (packs lint and broken) and,
    editable, ``fabric-devpack 0.1`` (pack dev, its code in a project folder)."""
    root = tmp_path_factory.mktemp("site")
    python = _virtualenv(root / "venv")
    files = {"fabric_lintpack.py": LINTPACK, "fabric_lintpack-1.0.0.dist-info/entry_points.txt":
             ENTRY_POINTS}  # fmt: skip
    dev = write(root, PLANTED.format(mark=str(root / "dev-imported")), "devpack/fabric_devpack.py")
    editable = {
        "__editable___fabric_devpack_finder.py": DEV_FINDER.format(path=str(dev)),
        "__editable__.fabric_devpack-0.1.pth": "import __editable___fabric_devpack_finder; "
        "__editable___fabric_devpack_finder.install()\n",
        "fabric_devpack-0.1.dist-info/entry_points.txt": "[fabric.packs]\n"
        "dev = fabric_devpack:build\n",
    }
    for wheel in (
        _wheel(root, "fabric-lintpack", "1.0.0", files),
        _wheel(root, "fabric-devpack", "0.1", editable),
    ):
        pip = [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)]
        subprocess.run(pip, check=True, capture_output=True)
    return python


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A config folder a run has written into: a distribution's metadata declaring packs
    (one named as the installed one), a .pth naming another folder of them, and a module
    named as the installed pack's. Each module leaves a mark when imported."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x=1\n")
    planted = "[fabric.packs]\nevil = evil_module:build\nlint = evil_module:build\n"
    write(tmp_path, "Metadata-Version: 2.1\nName: evil-pack\nVersion: 6.6.6\n",
          "evil_pack-6.6.6.dist-info/METADATA")  # fmt: skip
    write(tmp_path, planted, "evil_pack-6.6.6.dist-info/entry_points.txt")
    write(tmp_path, PLANTED.format(mark=str(tmp_path / "evil-imported")), "evil_module.py")
    write(tmp_path, PLANTED.format(mark=str(tmp_path / "shadow-imported")), "fabric_lintpack.py")
    elsewhere = tmp_path / "elsewhere"
    write(
        elsewhere, "Metadata-Version: 2.1\nName: other\nVersion: 1\n", "other-1.dist-info/METADATA"
    )
    other = "[fabric.packs]\nother = evil_module:build\n"
    write(elsewhere, other, "other-1.dist-info/entry_points.txt")
    write(tmp_path, f"{elsewhere}\n", "planted.pth")
    return tmp_path


def _config(project: Path, base_url: str, more: str = "") -> Path:
    """The project's fabric.yaml: a mock model server, pack ``mine``, then ``more``."""
    text = f"llm: {json.dumps(mock_llm(base_url))}\npacks:\n  mine: {{builder: engineering}}\n"
    return write(project, text + more)


def _nothing_planted_ran(project: Path, python: Path) -> None:
    assert not (project / "evil-imported").exists()
    assert not (project / "shadow-imported").exists()
    assert not (python.parents[2] / "dev-imported").exists()  # the editable one's project


def _env(project: Path, **extra: str) -> dict[str, str]:
    """This environment, with the project folder on the import path from the start too."""
    path = os.pathsep.join([*os.environ.get("PYTHONPATH", "").split(os.pathsep), str(project)])
    return {**os.environ, "PYTHONPATH": path.strip(os.pathsep), **extra}


def test_installed_packs_are_listed_with_their_origin(python: Path, project: Path) -> None:
    _config(project, "http://127.0.0.1:1/v1")
    done = run_fabric("packs", "--json", cwd=project, env=_env(project), python=[str(python)])
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert list(rows) == ["mine", "broken", "dev", "lint"]  # the planted evil and other: not at all
    assert rows["mine"]["origin"] == "fabric.yaml"
    lint = rows["lint"]
    assert lint["origin"] == "fabric-lintpack 1.0.0"  # not the planted evil-pack's 'lint'
    assert lint["description"] == "Lints the files a task names."
    assert lint["tools"] == ["read_file", "finish_task"]
    dev = rows["dev"]["error"]  # an editable install: its code is in an open folder
    assert dev["message"] == (
        f"pack 'dev' (installed by fabric-devpack 0.1): its code would be imported from "
        f"{python.parents[2] / 'devpack' / 'fabric_devpack.py'}, outside this Python's "
        "site-packages; fabric imports installed packs only from there, where no run can write"
    )
    assert dev["hint"].endswith("(builder: fabric_devpack:build)")
    broken = rows["broken"]  # told, and the listing goes on
    assert broken["origin"] == "fabric-lintpack 1.0.0"
    assert broken["error"]["message"] == (
        "pack 'broken' (installed by fabric-lintpack 1.0.0): module 'fabric_lintpack' has no "
        "callable 'missing'"
    )
    for name in ("evil", "lint"):
        assert f"ignored pack {name!r}: evil-pack 6.6.6 is declared in {project}, a folder on " \
               "the import path outside this Python's site-packages" in done.stderr  # fmt: skip
    assert "other" not in done.stderr  # a .pth outside site-packages is never read
    _nothing_planted_ran(project, python)

    text = run_fabric("packs", cwd=project, env=_env(project), python=[str(python)])
    assert "lint  ·  model default (m)\n" in text.stdout
    assert "    from: fabric-lintpack 1.0.0\n" in text.stdout
    assert "broken  ·  CANNOT BE USED\n    from: fabric-lintpack 1.0.0\n" in text.stdout


def test_an_installed_pack_runs_by_name(python: Path, project: Path) -> None:
    script = [
        completion(None, [("read_file", {"path": "a.py"})]),
        completion(None, [("finish_task", {"problems": ["x is a poor name"]})]),
    ]
    with MockOpenAIServer(script, models=["m"]) as server:
        _config(project, server.base_url)
        done = run_fabric("run", "--pack", "lint", "-w", "ws", "--json", "lint a.py",
                          cwd=project, env=_env(project), python=[str(python)])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["status"] == "completed"
    assert out["payload"] == {"problems": ["x is a poor name"]}
    assert server.requests[0]["messages"][0]["content"] == "You lint files."
    _nothing_planted_ran(project, python)

    evil = run_fabric("run", "--pack", "evil", "-w", "ws", "x", cwd=project,
                      env=_env(project), python=[str(python)])  # fmt: skip
    assert evil.returncode == 2
    assert "no pack named 'evil'" in evil.stderr
    assert "known packs: mine, broken, dev, lint" in evil.stderr
    _nothing_planted_ran(project, python)


def test_a_config_gives_an_installed_pack_settings(python: Path, project: Path) -> None:
    config = _config(
        project,
        "http://127.0.0.1:1/v1",
        "  strict-lint: {builder: lint, strict: true, limits: {max_steps: 3}}\n"
        "  typo-lint: {builder: lint, strictt: true}\n"
        "default_pack: lint\n",  # a config may name an installed pack as its default
    )
    done = run_fabric("packs", "--check", "--json", cwd=project, env=_env(project),
                      python=[str(python)])  # fmt: skip
    assert done.returncode == 1  # a pack has a problem; every other one is checked
    report = json.loads(done.stdout)
    rows = {row["name"]: row for row in report["packs"]}
    assert list(rows) == ["mine", "strict-lint", "typo-lint", "broken", "dev", "lint"]
    assert rows["strict-lint"] == {"name": "strict-lint", "origin": "fabric.yaml", "ok": True}
    assert rows["lint"] == {"name": "lint", "origin": "fabric-lintpack 1.0.0", "ok": True}
    typo = rows["typo-lint"]["error"]["message"]  # the builder's own settings model checks it
    assert typo.startswith(f"{config.name}:{line_of(config, 'strictt')}: packs.typo-lint.strictt:")
    assert "unknown key (valid keys: builder," in typo and "strict" in typo.split("valid keys")[1]
    assert "has no callable 'missing'" in rows["broken"]["error"]["message"]
    assert sorted(p["name"] for p in report["ignored"]) == ["evil", "lint"]
    _nothing_planted_ran(project, python)
