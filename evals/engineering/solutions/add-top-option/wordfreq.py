"""`python wordfreq.py FILE`: how often each word occurs in a text file, most frequent first."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def count_words(text: str) -> Counter[str]:
    return Counter(WORD.findall(text.lower()))


def ranked(counts: Counter[str]) -> list[tuple[str, int]]:
    """Most frequent first; words with the same count in alphabetical order."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Count the words of a text file.")
    parser.add_argument("file", type=Path)
    parser.add_argument(
        "--top", type=_positive, metavar="N", help="print only the N most frequent words"
    )
    args = parser.parse_args(argv)
    try:
        text = args.file.read_text(encoding="utf-8")
    except OSError as exc:
        parser.error(f"cannot read {args.file}: {exc.strerror}")
    for word, count in ranked(count_words(text))[: args.top]:
        print(f"{word} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
