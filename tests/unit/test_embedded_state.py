"""The files the shared embedded server and fabric processes agree on: where they are, who may
read them, what names a server, and the bounded log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabric.infrastructure.llm.embedded_state import (
    ServerState,
    bound_log,
    ensure_private_dir,
    is_server,
    open_lock,
    read_state,
    remove_state,
    server_name,
    state_dir,
    try_lock,
    unlock,
    write_state,
)

STATE = ServerState(
    pid=4242, url="http://127.0.0.1:5/v1", api_key="k" * 40, model="/m.gguf", name="abc"
)


def test_the_folder_is_under_the_runtime_folder_else_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    assert state_dir() == tmp_path / "run" / "fabric" / "embedded"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert state_dir() == tmp_path / "cache" / "fabric" / "embedded"


def test_the_folder_is_private(tmp_path: Path) -> None:
    folder = ensure_private_dir(tmp_path / "a" / "embedded")
    assert folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o755)  # loosened by someone: made private again
    assert ensure_private_dir(folder).stat().st_mode & 0o777 == 0o700


def test_a_symlink_or_a_file_is_not_trusted_as_the_folder(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "file").write_text("")
    for path in (tmp_path / "link", tmp_path / "file"):
        with pytest.raises((PermissionError, FileExistsError)):
            ensure_private_dir(path)


def test_the_name_changes_with_the_model_file_and_the_settings(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    program = ["python", "-m", "server"]
    name = server_name(model, 8192, 0, program)
    assert name == server_name(model, 8192, 0, program)
    assert name != server_name(model, 4096, 0, program)
    assert name != server_name(model, 8192, 2, program)
    assert name != server_name(model, 8192, 0, ["other"])
    info = model.stat()
    os.utime(model, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    touched = server_name(model, 8192, 0, program)
    assert touched != name
    replacement = tmp_path / "new.gguf"  # a download moved into place: same size and mtime
    replacement.write_bytes(b"GGUF two")
    os.utime(replacement, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns))
    replacement.replace(model)
    assert server_name(model, 8192, 0, program) != touched


def test_one_interpreter_under_two_names_finds_one_server(tmp_path: Path) -> None:
    """A bench started with .venv/bin/python and an eval with .venv/bin/python3 started two
    copies of the model on two cores; both names are one interpreter, so one server."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    (bin_dir := tmp_path / "bin").mkdir()
    (bin_dir / "python3.11").write_text("")
    (bin_dir / "python3").symlink_to("python3.11")
    (bin_dir / "python").symlink_to("python3")
    names = {
        server_name(model, 8192, 0, [str(bin_dir / alias), "-m", "server"])
        for alias in ("python", "python3", "python3.11")
    }
    assert len(names) == 1
    (bin_dir / "other").write_text("")
    assert server_name(model, 8192, 0, [str(bin_dir / "other"), "-m", "server"]) not in names


def test_the_state_file_is_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "abc.json"
    write_state(path, STATE)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_state(path) == STATE
    assert STATE.api_key not in repr(STATE)
    assert [p.name for p in tmp_path.iterdir()] == ["abc.json"]  # no partial file left


def test_a_state_file_others_could_have_written_or_a_damaged_one_is_ignored(
    tmp_path: Path,
) -> None:
    path = tmp_path / "abc.json"
    write_state(path, STATE)
    path.chmod(0o644)
    assert read_state(path) is None
    path.write_text("{not json")
    path.chmod(0o600)
    assert read_state(path) is None
    link = tmp_path / "link.json"
    write_state(tmp_path / "real.json", STATE)
    link.symlink_to(tmp_path / "real.json")
    assert read_state(link) is None
    assert read_state(tmp_path / "missing.json") is None


def test_only_the_server_it_describes_removes_a_state_file(tmp_path: Path) -> None:
    path = tmp_path / "abc.json"
    write_state(path, STATE)
    remove_state(path, STATE.pid + 1)  # an older server, stopping late
    assert path.exists()
    remove_state(path, STATE.pid)
    assert not path.exists()


def test_leases_are_shared_and_the_exclusive_lock_waits_for_them(tmp_path: Path) -> None:
    path = tmp_path / "abc.lease"
    first, second, server = open_lock(path), open_lock(path), open_lock(path)
    try:
        assert try_lock(first, exclusive=False) and try_lock(second, exclusive=False)
        assert not try_lock(server, exclusive=True)
        os.close(first)  # a client that ends (or is killed) lets go
        assert not try_lock(server, exclusive=True)
        unlock(second)
        assert try_lock(server, exclusive=True)
    finally:
        for fd in (second, server):
            os.close(fd)


def test_a_server_is_known_by_its_command_line(tmp_path: Path) -> None:
    code = "import sys; print('up', flush=True); sys.stdin.read()"
    argv = [sys.executable, "-c", code, "embedded_supervisor", "--name", "abc"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert is_server(proc.pid, "abc")
        assert not is_server(proc.pid, "abd")
        assert not is_server(os.getpid(), "abc")
        assert proc.stdin is not None
        proc.stdin.close()
    assert not is_server(proc.pid, "abc")


def test_the_log_stays_bounded_and_writers_carry_on(tmp_path: Path) -> None:
    log = tmp_path / "embedded-server.log"
    writer = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # a server's stderr
    try:
        os.write(writer, b"x" * 900)
        bound_log(log, limit=1000)
        assert log.stat().st_size == 900  # under the limit: untouched
        os.write(writer, b"y" * 200)
        bound_log(log, limit=1000)
        assert log.stat().st_size == 0
        assert (tmp_path / "embedded-server.log.1").read_bytes() == b"x" * 900 + b"y" * 200
        os.write(writer, b"after\n")
        assert log.read_bytes() == b"after\n"  # appended at the new end, no hole
    finally:
        os.close(writer)
