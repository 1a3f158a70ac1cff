import pytest

from inventory import Inventory, OutOfStock
from orders import Desk


def test_reserve_takes_from_stock():
    inv = Inventory({"mug": 5, "tea": 2})
    inv.reserve([("mug", 2), ("tea", 2)])
    assert inv.stock == {"mug": 3, "tea": 0}


def test_failed_reservation_leaves_stock_alone():
    inv = Inventory({"mug": 5, "tea": 1})
    with pytest.raises(OutOfStock, match="tea"):
        inv.reserve([("mug", 2), ("tea", 3)])
    assert inv.stock == {"mug": 5, "tea": 1}


def test_desk_rejects_and_keeps_counts():
    desk = Desk(Inventory({"mug": 3, "pot": 0}))
    assert not desk.place("A-1", [("mug", 1), ("pot", 1)])
    assert desk.place("A-2", [("mug", 3)])
    assert "pot" in desk.rejected["A-1"]


def test_cancel_puts_items_back():
    desk = Desk(Inventory({"mug": 3}))
    desk.place("A-1", [("mug", 2)])
    desk.cancel("A-1")
    assert desk.inventory.available("mug") == 3
