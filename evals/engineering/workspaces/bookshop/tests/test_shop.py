import pytest

from shop import Book, Order, load_catalog, order_total, receipt, save_catalog


def test_catalog_round_trip(tmp_path):
    books = load_catalog("catalog.json")
    assert books["9780000000033"].title == "The Night Ferry"
    save_catalog(books, tmp_path / "copy.json")
    assert load_catalog(tmp_path / "copy.json") == books


def test_cannot_order_more_than_stock():
    with pytest.raises(ValueError, match="in stock"):
        Order("ana").add(Book("1", "Out", 1000, stock=0))


def test_small_order_pays_shipping():
    order = Order("ana")
    order.add(Book("1", "A", 1850, stock=1))
    assert order_total(order) == 1850 + 395


def test_coupon_and_free_shipping():
    order = Order("ana", coupon="READ10")
    order.add(Book("1", "A", 2400, stock=2), 2)
    assert order_total(order) == 4320


def test_receipt():
    order = Order("Bo", coupon="SPRING25")
    order.add(Book("1", "Small Gardens", 1850, stock=1))
    assert receipt(order).splitlines() == [
        "Receipt for Bo",
        "1 x Small Gardens               EUR 18.50",
        "coupon SPRING25                   -EUR 4.62",
        "total                           EUR 17.83",
    ]
