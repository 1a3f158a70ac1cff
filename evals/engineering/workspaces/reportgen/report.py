"""`python report.py sales.csv`: prints a CSV file as a plain-text table."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from table import render_table


def build_report(path: str | Path) -> str:
    with open(path, newline="", encoding="utf-8") as file:
        header, *rows = list(csv.reader(file))
    return render_table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print a CSV file as a table.")
    parser.add_argument("csv_file")
    args = parser.parse_args(argv)
    print(build_report(args.csv_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
