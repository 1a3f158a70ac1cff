"""``fabric show RUN --html``: where the file goes, what it holds (the script allowed by its
hash, the events unable to end their block), secrets left out, and the errors a user meets."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabric.interfaces.cli.app import app

from .runlogs import HOSTILE, Log, hostile_run, write_runlog

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runlogs" / "v3"
COMPLETED = FIXTURES / "completed" / "runlog.jsonl"


def _inline(html: str, tag: str) -> list[tuple[str, str]]:
    """(attributes, text) of each <tag> element."""
    return re.findall(rf"<{tag}([^>]*)>(.*?)</{tag}>", html, flags=re.DOTALL)


def _sha(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_writes_run_id_html_in_the_current_folder_and_prints_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run named by its id, under the config's runs folder."""
    run_id = "20261125T010306.803Z-ae7fb4"
    (tmp_path / "fabric.yaml").write_text("version: 1\nruns_dir: runs\n", "utf-8")
    shutil.copytree(COMPLETED.parent, tmp_path / "runs" / run_id)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["show", run_id, "--html"])
    assert result.exit_code == 0, result.output
    written = tmp_path / f"{run_id}.html"
    assert result.stdout.strip() == str(written)
    html = written.read_text("utf-8")
    assert "<title>fabric run 20261125T010306.803Z-ae7fb4 · fixture</title>" in html


def test_out_names_the_file(tmp_path: Path) -> None:
    out = tmp_path / "shared" / "run.html"
    out.parent.mkdir()
    result = CliRunner().invoke(app, ["show", str(COMPLETED.parent), "--html", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    assert out.read_text("utf-8").startswith("<!doctype html>")


def test_the_page_allows_exactly_its_own_script_and_style_by_hash(tmp_path: Path) -> None:
    out = tmp_path / "run.html"
    CliRunner().invoke(app, ["show", str(COMPLETED), "--html", "--out", str(out)])
    html = out.read_text("utf-8")
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert csp is not None
    scripts = _inline(html, "script")
    assert [attrs.strip() for attrs, _ in scripts] == [
        'type="application/json" id="fabric-run"',
        'type="module"',
    ]
    (style,) = _inline(html, "style")
    policy = dict(part.strip().split(" ", 1) for part in csp.group(1).split(";"))
    assert policy == {
        "default-src": "'none'",
        "script-src": f"'sha256-{_sha(scripts[1][1])}'",
        "style-src": f"'sha256-{_sha(style[1])}'",
        "img-src": "data:",
        "base-uri": "'none'",
        "form-action": "'none'",
    }
    events = json.loads(scripts[0][1])["events"]
    assert [e["seq"] for e in events] == list(range(55))
    markup = html.replace(scripts[0][1], "")  # the page without the run's data
    assert re.findall(r'(?:src|href|action)="([^"]*)"', markup) == ["data:,"]  # the icon
    assert not re.search(r"https?:|url\(|@import", markup)  # nothing to fetch


def test_no_text_of_the_run_can_end_the_data_block(tmp_path: Path) -> None:
    path = write_runlog(tmp_path / "run", hostile_run())
    out = tmp_path / "run.html"
    CliRunner().invoke(app, ["show", str(path), "--html", "--out", str(out)])
    html = out.read_text("utf-8")
    data = _inline(html, "script")[0][1]
    assert not set("<>&\u2028\u2029") & set(data)
    assert html.count("</script") == 2
    assert json.loads(data)["events"][1]["text"].endswith(HOSTILE)  # the same text, escaped


def test_a_run_id_cannot_place_the_file_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "here"
    folder.mkdir()
    monkeypatch.chdir(folder)
    path = write_runlog(tmp_path / "run", hostile_run(run_id="../../etc/x <b>"))
    result = CliRunner().invoke(app, ["show", str(path), "--html"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in folder.iterdir()] == ["etc_x_b.html"]
    assert result.stdout.strip() == str(folder / "etc_x_b.html")


def test_secrets_are_left_out_as_fabric_show_leaves_them_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-3f9a1c77e2b84d5a"
    monkeypatch.setenv("NOTES_SERVICE_TOKEN", secret)
    log = Log("r-secret")
    log.started(task=f"use the token {secret}")
    log.step(1, content=f"the token is {secret}", output=f"TOKEN={secret}\n")
    log.finished(payload={"summary": f"done with {secret}"})
    path = write_runlog(tmp_path / "run", log.events)
    out = tmp_path / "run.html"
    shown = CliRunner().invoke(app, ["show", str(path)])
    assert secret not in shown.stdout and "[redacted]" in shown.stdout
    result = CliRunner().invoke(app, ["show", str(path), "--html", "--out", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text("utf-8")
    assert secret not in html
    assert html.count("[redacted]") == 5  # task, model text, tool output (+ its request), payload


def test_an_unknown_run_is_a_clear_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fabric.yaml").write_text("version: 1\nruns_dir: runs\n", "utf-8")
    result = CliRunner().invoke(app, ["show", "20990101T000000.000Z-nope", "--html"])
    assert result.exit_code == 2
    assert "error: no run '20990101T000000.000Z-nope'" in result.stderr
    assert "hint: pass the runlog path printed by `fabric run`" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fabric.yaml"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "x.html"], "--out goes with --html"),
        (["--html", "--json"], "--html writes the whole run"),
        (["--html", "--step", "2"], "--html writes the whole run"),
    ],
)
def test_options_that_do_not_go_with_html(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["show", str(COMPLETED), *args])
    assert result.exit_code == 2
    assert message in result.stderr
