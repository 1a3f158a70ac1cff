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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Count the words of a text file.")
    parser.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    try:
        text = args.file.read_text(encoding="utf-8")
    except OSError as exc:
        parser.error(f"cannot read {args.file}: {exc.strerror}")
    for word, count in ranked(count_words(text)):
        print(f"{word} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
