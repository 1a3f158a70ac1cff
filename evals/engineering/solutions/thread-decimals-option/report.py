"""`python report.py sales.csv`: prints a CSV file as a plain-text table."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from table import render_table


def build_report(path: str | Path, decimals: int = 2) -> str:
    with open(path, newline="", encoding="utf-8") as file:
        header, *rows = list(csv.reader(file))
    return render_table(header, rows, decimals)


def _decimals(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print a CSV file as a table.")
    parser.add_argument("csv_file")
    parser.add_argument(
        "--decimals", type=_decimals, default=2, help="decimals of fractional numbers (2)"
    )
    args = parser.parse_args(argv)
    print(build_report(args.csv_file, args.decimals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
