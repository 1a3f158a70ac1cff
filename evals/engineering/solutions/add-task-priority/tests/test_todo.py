import json

from cli import main
from models import Task
from store import load, save


def run(tmp_path, capsys, *args):
    code = main(["--file", str(tmp_path / "todo.json"), *args])
    return code, capsys.readouterr().out.splitlines()


def test_add_and_list(tmp_path, capsys):
    run(tmp_path, capsys, "add", "Buy milk")
    run(tmp_path, capsys, "add", "Call Sam")
    assert run(tmp_path, capsys, "list") == (0, ["[ ] #1 Buy milk", "[ ] #2 Call Sam"])


def test_done(tmp_path, capsys):
    run(tmp_path, capsys, "add", "Buy milk")
    run(tmp_path, capsys, "done", "1")
    assert run(tmp_path, capsys, "list")[1] == ["[x] #1 Buy milk"]


def test_done_unknown_task(tmp_path, capsys):
    assert run(tmp_path, capsys, "done", "7")[0] == 1


def test_store_round_trip(tmp_path):
    tasks = [Task(1, "a"), Task(2, "b", done=True)]
    save(tmp_path / "t.json", tasks)
    assert load(tmp_path / "t.json") == tasks
    assert json.loads((tmp_path / "t.json").read_text())[1]["done"] is True


def test_high_priority_first(tmp_path, capsys):
    run(tmp_path, capsys, "add", "Water plants", "--priority", "low")
    run(tmp_path, capsys, "add", "Buy milk")
    run(tmp_path, capsys, "add", "Pay rent", "--priority", "high")
    assert run(tmp_path, capsys, "list")[1] == [
        "[ ] #3 ! Pay rent",
        "[ ] #2 Buy milk",
        "[ ] #1 Water plants",
    ]


def test_old_files_load_as_normal(tmp_path):
    (tmp_path / "old.json").write_text('[{"id": 1, "title": "a", "done": false}]')
    assert load(tmp_path / "old.json")[0].priority == "normal"
