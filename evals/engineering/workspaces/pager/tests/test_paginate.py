import pytest

from paginate import get_page, page_count


def test_exact_multiple_fills_whole_pages():
    assert page_count(9, 3) == 3


def test_remainder_gets_its_own_page():
    assert page_count(10, 3) == 4


def test_no_items_no_pages():
    assert page_count(0, 5) == 0


def test_last_page_holds_the_remainder():
    page = get_page(list(range(10)), 4, per_page=3)
    assert page.items == [9]
    assert not page.has_next


def test_empty_list_has_one_empty_page():
    page = get_page([], 1)
    assert page.items == [] and page.total_pages == 1


def test_page_past_the_end_is_refused():
    with pytest.raises(IndexError):
        get_page(list(range(6)), 3, per_page=3)
