import pytest

from booking import Booking, can_book, clock, overlaps
from screen import agenda


def test_touching_bookings_do_not_overlap():
    assert not overlaps(Booking(540, 600), Booking(600, 660))


def test_overlapping_booking_is_refused():
    assert not can_book([Booking(540, 600)], Booking(570, 630))


def test_free_time_can_be_booked():
    assert can_book([Booking(540, 600)], Booking(600, 630))


def test_backwards_booking_is_invalid():
    with pytest.raises(ValueError):
        Booking(600, 540)


def test_agenda_is_in_time_order():
    text = agenda([Booking(600, 630, "Ana"), Booking(540, 570, "Bo")])
    assert text.splitlines() == ["09:00-09:30  Bo", "10:00-10:30  Ana"]
    assert clock(5) == "00:05"
