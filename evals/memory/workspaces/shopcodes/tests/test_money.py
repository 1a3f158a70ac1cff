from money import percent_of, shown


def test_a_half_cent_rounds_up() -> None:
    assert percent_of(4333, 15) == 650
    assert percent_of(1000, 5) == 50


def test_amounts_are_shown_in_euros() -> None:
    assert shown(1234) == "12.34 EUR"
