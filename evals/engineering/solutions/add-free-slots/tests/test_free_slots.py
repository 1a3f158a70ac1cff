from booking import Booking, free_slots


def test_free_slots_between_bookings():
    busy = [Booking(720, 780), Booking(540, 600), Booking(570, 660)]
    assert free_slots(busy, 480, 1080) == [(480, 540), (660, 720), (780, 1080)]


def test_free_slots_of_an_empty_day():
    assert free_slots([], 480, 1080) == [(480, 1080)]


def test_free_slots_ignore_time_outside_the_day():
    assert free_slots([Booking(400, 500), Booking(1000, 1200)], 480, 1080) == [(500, 1000)]


def test_free_slots_of_a_full_day():
    assert free_slots([Booking(480, 800), Booking(800, 1080)], 480, 1080) == []
