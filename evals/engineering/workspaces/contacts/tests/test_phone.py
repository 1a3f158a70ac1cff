import pytest

from addressbook import AddressBook
from phone import normalize_phone, same_number


def test_national_number_gets_country_code():
    assert normalize_phone("020 7946 0018") == "+442079460018"


def test_international_prefix_is_kept():
    assert normalize_phone("+49 30 901820", country="GB") == "+4930901820"


def test_double_zero_prefix():
    assert normalize_phone("0049 30 901820") == "+4930901820"


def test_same_number_written_two_ways():
    assert same_number("(020) 7946-0018", "+44 20 7946 0018")


def test_no_digits_is_refused():
    with pytest.raises(ValueError):
        normalize_phone("call me")


def test_address_book_refuses_duplicates():
    book = AddressBook()
    book.add("Mo", "020 7946 0018")
    with pytest.raises(ValueError, match="Mo"):
        book.add("Jo", "+44 20 7946 0018")
