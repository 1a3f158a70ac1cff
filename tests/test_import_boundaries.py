"""The layers stay honest: domain imports no other fabric layer; application imports only
domain and config; config imports only domain. Checked on the source, so a lazy import inside a
function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fabric"
ALLOWED = {
    "domain": {"fabric.domain"},
    "application": {"fabric.domain", "fabric.config", "fabric.application"},
    "config": {"fabric.domain", "fabric.config"},
}
FORBIDDEN_THIRD_PARTY = {
    "application": {"httpx", "fastapi", "typer", "uvicorn", "yaml", "dbos", "sqlalchemy", "mcp"}
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text("utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: stays inside the same package
                continue
            names.append(node.module or "")
    return names


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    files = sorted((SRC / layer).rglob("*.py"))
    assert files, f"no modules found in {layer}"
    bad = []
    for path in files:
        for name in _imports(path):
            top = name.split(".")[0]
            if name.startswith("fabric") and name != "fabric":
                if not any(name == a or name.startswith(a + ".") for a in ALLOWED[layer]):
                    bad.append(f"{path.relative_to(SRC)} imports {name}")
            elif name == "fabric" and layer != "application":
                bad.append(f"{path.relative_to(SRC)} imports fabric")
            elif top in FORBIDDEN_THIRD_PARTY.get(layer, set()):
                bad.append(f"{path.relative_to(SRC)} imports {name}")
    assert not bad, "layer boundary broken:\n" + "\n".join(bad)


def test_boundary_check_catches_a_violation(tmp_path: Path) -> None:
    """The checker itself works: an outer-layer import is found."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from fabric.infrastructure.llm import openai_compat\n")
    assert "fabric.infrastructure.llm" in _imports(module)


NOT_FROM = {
    "infrastructure": ("fabric.interfaces",),
    "interfaces/cli": ("fabric.interfaces.http",),
    "interfaces/http": ("fabric.interfaces.cli",),
    "interfaces/mcp": ("fabric.interfaces.cli", "fabric.interfaces.http"),
}
"""Adapters never reach into the interfaces; the CLI and the HTTP service share code through the
layers below them (and ``interfaces/compose.py``, ``interfaces/models_report.py``), not through
each other; the MCP server (``interfaces/mcp``), which both start, reaches into neither. The
one exception: ``fabric serve`` (cli/serve.py) starts the HTTP service."""
STARTS_THE_SERVICE = "interfaces/cli/serve.py"


@pytest.mark.parametrize("folder", sorted(NOT_FROM))
def test_no_reaching_sideways_or_outwards(folder: str) -> None:
    bad = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in sorted((SRC / folder).rglob("*.py"))
        if str(path.relative_to(SRC)) != STARTS_THE_SERVICE
        for name in _imports(path)
        if name.startswith(NOT_FROM[folder])
    ]
    assert not bad, "boundary broken:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "name",
    [
        "sandbox/launcher.py",
        "sandbox/confine/__init__.py",
        "sandbox/confine/landlock.py",
        "sandbox/confine/namespaces.py",
        "sandbox/confine/privileges.py",
        "sandbox/confine/syscalls.py",
        "packs/import_guard.py",
        "packs/run_ledger.py",
        "packs/git_audit.py",
        "packs/git_config.py",
        "packs/git_files.py",
        "packs/git_repos.py",
    ],
)
def test_the_sandbox_launcher_uses_the_standard_library_only(name: str) -> None:
    """It runs as `python -I -S` (no site-packages, nothing from the workspace): an import of
    fabric or a third-party package would fail there, or load code a command could plant. The
    import guard runs before anything else is imported, for the same reason."""
    path = SRC / "infrastructure" / name
    tops = {n.split(".")[0] for n in _imports(path)}
    import sys

    assert tops <= set(sys.stdlib_module_names) | {"__future__", "confine"}, tops


def test_a_runlog_s_file_name_is_spelled_in_one_place() -> None:
    """Where a run's runlog lies is built by ``runlog.names`` alone (``runlog_path``,
    ``RUNLOG_NAME``): a second spelling of the file name would drift from it unnoticed."""
    home = SRC / "infrastructure" / "runlog" / "names.py"
    spelled = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        if path != home
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.rstrip("\"'").endswith("runlog.jsonl")
        and "\n" not in node.value  # a docstring or message may name the file
        and " " not in node.value
    ]
    assert not spelled, "the runlog's file name spelled outside runlog/names.py:\n" + "\n".join(
        spelled
    )
