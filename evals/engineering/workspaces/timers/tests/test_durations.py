from datetime import datetime

import pytest

from durations import format_duration, parse_duration
from timer import schedule


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("1d", 86_400)])
def test_single_unit(text, seconds):
    assert parse_duration(text) == seconds


def test_hours_and_minutes():
    assert parse_duration("1h30m") == 5_400


def test_spaces_between_parts():
    assert parse_duration(" 2h 15m ") == 8_100


@pytest.mark.parametrize("seconds", [0, 59, 3_600, 5_400, 90_061])
def test_format_reads_back(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "15", "m", "5x", "1h-5m"])
def test_not_a_duration(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_schedule_says_when():
    assert schedule("1h1m", "tea", datetime(2024, 1, 1, 8, 0, 0)) == "tea: in 1h1m, at 09:01:00"
