"""pytest's output trimmed to what a model needs, checked on output of real pytest runs: a
tiny project with many passing tests, a wrong assertion, an exception deep in a call chain, a
broken fixture and a test that prints, run the ways a model runs pytest."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fabric.domain.test_output import runs_pytest, trim_test_output

LIMIT = 2_000

PROJECT = {
    "calc.py": """\
        def add(a, b):
            return a - b


        def lookup(table, key, depth=3):
            if depth == 0:
                return table[key]
            return lookup(table, key, depth - 1)
        """,
    "test_calc.py": """\
        import pytest

        from calc import add, lookup


        @pytest.mark.parametrize("n", range(60))
        def test_many_things_pass(n):
            print("noise from a passing test", n)
            assert n == n


        def test_add():
            assert add(2, 2) == 4


        def test_lookup():
            print("looking up a key that is not there")
            assert lookup({"a": 1}, "b") == 1


        @pytest.fixture
        def broken():
            raise RuntimeError("the fixture broke")


        def test_with_broken_fixture(broken):
            pass
        """,
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("project")
    for name, text in PROJECT.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


@functools.cache
def pytest_output(folder: Path, *flags: str) -> str:
    """What ``python -m pytest`` prints for the project, run for real (once per flags)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *flags],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # some tests failed
    return done.stdout + done.stderr


@pytest.mark.parametrize("flags", [(), ("-q",), ("-v",), ("-rA",)], ids=["plain", "q", "v", "rA"])
def test_failures_and_summary_are_kept_passing_noise_is_not(
    project: Path, flags: tuple[str, ...]
) -> None:
    full = pytest_output(project, *flags)
    assert len(full) > LIMIT  # else there is nothing to trim
    trimmed = trim_test_output(full, LIMIT)
    assert len(trimmed) < LIMIT + 200
    assert trimmed.startswith("[pytest output trimmed to the failures and the summary:")
    # what broke and where
    assert "FAILED test_calc.py::test_add - assert 0 == 4" in trimmed
    assert "FAILED test_calc.py::test_lookup - KeyError: 'b'" in trimmed
    assert "ERROR test_calc.py::test_with_broken_fixture - RuntimeError: the fixture broke" in (
        trimmed
    )
    assert "E       assert 0 == 4" in trimmed  # the assertion diff
    assert ">           return table[key]" in trimmed  # the last frame: where it raised
    assert "calc.py:7: KeyError" in trimmed
    assert trimmed.splitlines()[-1].strip("= ").startswith("2 failed, 60 passed, 1 error in ")
    # what did not
    assert "noise from a passing test" not in trimmed
    assert "platform " not in trimmed and "rootdir:" not in trimmed
    assert "PASSED" not in trimmed.replace("PASSED line(s) left out", "")
    assert "test_many_things_pass" not in trimmed


def test_a_deep_traceback_keeps_its_first_and_last_frames(project: Path) -> None:
    full = pytest_output(project, "test_calc.py::test_lookup")
    trimmed = trim_test_output(full, 1_200)
    assert len(full) > 1_200
    assert '>       assert lookup({"a": 1}, "b") == 1' in trimmed  # where the test called in
    assert ">           return table[key]" in trimmed  # where it raised
    assert "frame(s) in between left out" in trimmed
    assert "looking up a key that is not there" in trimmed  # the failing test's own output


def test_short_output_is_left_as_it_is(project: Path) -> None:
    full = pytest_output(project, "-q", "test_calc.py::test_add")
    assert trim_test_output(full, 10_000) == full


def test_when_room_runs_out_later_failures_are_named_by_the_summary_only(
    project: Path,
) -> None:
    trimmed = trim_test_output(pytest_output(project, "-q"), 900)
    _, body = trimmed.split("\n", 1)
    assert len(body) <= 900
    assert "more failure section(s) left out" in body
    assert "FAILED test_calc.py::test_lookup" in body  # still named by the summary
    assert body.splitlines()[-1].startswith("2 failed, 60 passed, 1 error in ")


def test_a_collection_error_is_kept(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text("import not_a_module_anywhere\n")
    for n in range(40):
        (tmp_path / f"test_ok_{n}.py").write_text("def test_ok():\n    pass\n")
    full = pytest_output(tmp_path, "-v", "--continue-on-collection-errors")
    trimmed = trim_test_output(full, 800)
    assert "ModuleNotFoundError: No module named 'not_a_module_anywhere'" in trimmed
    assert "ERROR test_broken.py" in trimmed
    assert "test_ok_1.py" not in trimmed


def test_notes_after_the_summary_line_are_kept(project: Path) -> None:
    note = "fabric removed what this command created or changed in .git"
    trimmed = trim_test_output(pytest_output(project, "-q") + note + "\n", LIMIT)
    assert trimmed.rstrip().endswith(note)


def test_text_that_is_not_pytest_output_is_cut_in_the_middle() -> None:
    text = "start\n" + "x" * 10_000 + "\nthe end\n"
    cut = trim_test_output(text, 1_000)
    assert cut.startswith("start\n") and cut.endswith("the end\n")
    assert "characters cut from the middle" in cut
    assert len(cut) < 1_100


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["pytest"], True),
        (["pytest", "-q", "tests"], True),
        (["/usr/bin/py.test"], True),
        (["python", "-m", "pytest", "-x"], True),
        (["python3", "-X", "dev", "-m", "pytest"], True),
        (["python3.12", "-mpytest"], True),
        (["python", "-m", "unittest"], False),
        (["python", "-c", "import pytest"], False),
        (["python", "run_tests.py", "-m", "pytest"], False),
        (["git", "status"], False),
        ([], False),
    ],
)
def test_which_commands_run_pytest(command: list[str], expected: bool) -> None:
    assert runs_pytest(command) is expected
