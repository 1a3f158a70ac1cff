"""The figures of an answer that its quotes must hold: what counts as one, and which
spellings of it are the same."""

from __future__ import annotations

import pytest

from fabric.domain.figures import figures, unbacked


def said(text: str) -> list[str]:
    return [f.text for f in figures(text)]


def test_numbers_versions_amounts_dates_and_times_are_figures() -> None:
    text = (
        "Quillscript 2.4 (v1.10.3 before it) came out on 9 February 2021, Feb 2021, "
        "2021-02-09 or March 14, 2017; a ticket is 3.90 kr, 26,212,352 rows, 3 lines, "
        "the last train at 01:40, in 2016."
    )
    assert said(text) == [
        "2.4",
        "1.10.3",
        "9 February 2021",
        "Feb 2021",
        "March 14, 2017",
        "3.90",
        "26,212,352",
        "3",
        "01:40",
        "2016",
    ]  # 2021-02-09 is the same day as 9 February 2021: named once


def test_words_names_links_list_markers_and_citation_marks_are_not_figures() -> None:
    text = (
        "1. The first two lines (1) use utf-8 and md5 on x86_64 with Python3 [1].\n"
        "2) See https://example.org/v2.4/page-3 or [the page](https://example.org/2021)."
    )
    assert said(text) == []


@pytest.mark.parametrize(
    ("answer", "quote"),
    [
        ("26,212,352 rows", "26 212 352 rows"),
        ("26 212 352 rows", "26,212,352 rows"),
        ("26\u00a0212\u00a0352 rows", "26212352 rows"),
        ("3,90 kr", "3.90 kr"),
        ("1:40", "01:40"),
        ("00:25", "12:25 a.m."),
        ("13:40", "1:40 pm"),
        ("on 2 Nov. 2017", "2017-11-02"),
        ("in 2017", "14 March 2017"),
        ("in March 2017", "1.0 | 14 March 2017"),
        ("the 14th", "14 March 2017"),
        ("212 and 352", "26 212 352 rows"),  # three numbers side by side, read either way
    ],
)
def test_a_figure_is_backed_by_another_spelling_of_it(answer: str, quote: str) -> None:
    assert figures(answer) and unbacked(answer, [quote]) == []


@pytest.mark.parametrize(
    ("answer", "quote"),
    [
        ("version 1.1", "version 1.10"),
        ("version 1.10", "version 1.1"),
        ("3.9 kr", "3.90 kr"),
        ("26,212,353", "26,212,352"),
        ("9 February 2021", "9 February 2020"),
        ("9 February 2021", "February 2021"),  # a month does not back a day in it
        ("March 2021", "2021"),
        ("1:40", "1:40 pm"),
    ],
)
def test_a_different_figure_is_not_backed(answer: str, quote: str) -> None:
    assert [f.text for f in unbacked(answer, [quote])] == said(answer)
