"""`python cli.py add "Pay rent"`, `python cli.py list`, `python cli.py done 3`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from models import Task
from store import load, next_id, save


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="todo")
    parser.add_argument("--file", type=Path, default=Path("todo.json"))
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="add a task")
    add.add_argument("title")
    commands.add_parser("list", help="show the tasks")
    done = commands.add_parser("done", help="mark a task as done")
    done.add_argument("id", type=int)
    args = parser.parse_args(argv)

    tasks = load(args.file)
    if args.command == "add":
        task = Task(next_id(tasks), args.title)
        tasks.append(task)
        save(args.file, tasks)
        print(f"added #{task.id}")
    elif args.command == "list":
        for task in tasks:
            print(task.line())
    else:
        matches = [t for t in tasks if t.id == args.id]
        if not matches:
            print(f"todo: no task #{args.id}", file=sys.stderr)
            return 1
        matches[0].done = True
        save(args.file, tasks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
