"""Choosing a confinement backend, and what each backend is told: the refusals a user sees
when the machine offers no sandbox, the bubblewrap command line, the Landlock grants, the
seccomp program's shape. (Whether the confinement holds is tests/sandbox/.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from fabric.config.schema import SandboxSettings
from fabric.domain.errors import SandboxError
from fabric.infrastructure.sandbox import HostReport
from fabric.infrastructure.sandbox.profile import bwrap_args, hidden_paths, landlock_rules
from fabric.infrastructure.sandbox.seccomp import build_filter


def report(*, bwrap_error: str | None = None, landlock_error: str | None = None) -> HostReport:
    return HostReport(
        bwrap="/usr/bin/bwrap",
        bwrap_version="bubblewrap 0.8.0",
        bwrap_error=bwrap_error,
        landlock_abi=0 if landlock_error else 6,
        landlock_error=landlock_error,
        seccomp=True,
        cgroup=None,
        root=False,
    )


def test_auto_prefers_bubblewrap_then_landlock() -> None:
    assert report().backend("auto").name == "bwrap"
    fallback = report(bwrap_error="no user namespaces").backend("auto")
    assert fallback.name == "landlock" and "no user namespaces" in fallback.reason


def test_auto_without_any_backend_refuses_and_says_how_to_install_bubblewrap() -> None:
    host = report(bwrap_error="the bwrap program is not installed", landlock_error="no Landlock")
    with pytest.raises(SandboxError) as caught:
        host.backend("auto")
    assert "not installed" in caught.value.message and "no Landlock" in caught.value.message
    assert "apt-get install bubblewrap" in caught.value.hint
    assert "confinement: none" in caught.value.hint


def test_an_explicit_backend_is_not_replaced_by_another() -> None:
    with pytest.raises(SandboxError, match="'bwrap' confinement is not available"):
        report(bwrap_error="broken").backend("bwrap")
    assert report(bwrap_error="broken").backend("landlock").name == "landlock"


def test_none_is_only_what_the_config_says() -> None:
    host = report(bwrap_error="x", landlock_error="y")
    chosen = host.backend("none")
    assert chosen.name == "none" and "chosen" in chosen.reason
    assert SandboxSettings().confinement == "auto"


def test_bwrap_covers_hidden_paths_after_binding_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    runs = workspace / "runs"
    runs.mkdir(parents=True)
    args = bwrap_args(
        "/usr/bin/bwrap", workspace=workspace, hidden=[runs], network=False, command=["/bin/true"]
    )
    bind = args.index("--bind")
    assert args[bind + 1 : bind + 3] == [str(workspace), str(workspace)]
    assert args.index(str(runs)) > bind  # covered after the workspace is bound
    assert args[args.index("--ro-bind") + 1 : args.index("--ro-bind") + 3] == ["/", "/"]
    for flag in ("--unshare-all", "--die-with-parent", "--new-session"):
        assert flag in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert "--share-net" not in args
    assert args[-2:] == ["--", "/bin/true"]
    with_net = bwrap_args(
        "/usr/bin/bwrap", workspace=workspace, hidden=[], network=True, command=["/bin/true"]
    )
    assert "--share-net" in with_net


def test_credential_files_in_home_are_hidden(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".netrc").write_text("machine x password y\n")
    (home / "notes.txt").write_text("fine\n")
    hidden = hidden_paths([], home=str(home))
    assert home / ".ssh" in hidden and home / ".netrc" in hidden
    assert home / "notes.txt" not in hidden


def test_landlock_grants_read_around_hidden_paths_and_write_to_the_workspace(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    secret = home / ".ssh"
    secret.mkdir(parents=True)
    (home / "code").mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    rules = landlock_rules(
        workspace=workspace, temp=tmp_path / "tmp", hidden=[secret], network=False
    )
    read = [Path(p) for p in rules["read"]]  # type: ignore[attr-defined]
    assert home / "code" in read
    assert not any(p == secret or secret in p.parents or p in secret.parents for p in read)
    assert rules["write"] == [str(workspace), str(tmp_path / "tmp"), "/dev/shm"]
    assert rules["write_files"] == ["/dev/null"] and rules["network"] is False


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
@pytest.mark.parametrize("network", [False, True])
def test_the_seccomp_program_is_well_formed(machine: str, network: bool) -> None:
    program = build_filter(network=network, machine=machine)
    assert len(program) % 8 == 0
    instructions = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    assert instructions[-1] == (0x06, 0, 0, 0x80000000)  # the last return kills
    for index, (code, jt, jf, _) in enumerate(instructions):
        if code & 0x07 == 0x05:  # a jump: both targets inside the program
            assert index + 1 + max(jt, jf) < len(instructions)


def test_a_program_in_a_private_folder_stays_visible_read_only(tmp_path: Path) -> None:
    """A virtual environment under /tmp (bubblewrap gives the sandbox an empty /tmp): its root
    is bound back read-only, so `.venv/bin/python` still runs; /tmp itself stays private."""
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python3"
    python.write_text("")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    args = bwrap_args(
        "/usr/bin/bwrap",
        workspace=workspace,
        hidden=[],
        network=False,
        command=[str(python)],
        programs=[str(python), str(venv / "bin"), "/usr/bin", "relative/bin"],
    )
    pairs = [args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"]
    assert str(venv) in pairs
    assert "/tmp" not in pairs and "/usr/bin" not in pairs
    assert args.index(str(venv)) > args.index("--tmpfs")  # bound after /tmp is emptied


def test_the_probe_is_kept_on_disk_and_redone_when_the_machine_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabric.infrastructure.sandbox import probe

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = probe.host_report(fresh=True)
    stored = json.loads((tmp_path / "fabric" / "sandbox_probe.json").read_text())
    assert stored["report"]["bwrap_error"] == first.bwrap_error

    # a later process reads the answer instead of probing (here: a planted one, to tell)
    stored["report"]["bwrap_error"] = "planted"
    (tmp_path / "fabric" / "sandbox_probe.json").write_text(json.dumps(stored))
    monkeypatch.setattr(probe, "_memo", [])
    assert probe.host_report().bwrap_error == "planted"

    # another machine (kernel, bwrap binary, user, settings): probed again
    stored["key"] = "another machine"
    (tmp_path / "fabric" / "sandbox_probe.json").write_text(json.dumps(stored))
    monkeypatch.setattr(probe, "_memo", [])
    assert probe.host_report().bwrap_error == first.bwrap_error
    monkeypatch.setattr(probe, "_memo", [])  # leave no planted answer for other tests
