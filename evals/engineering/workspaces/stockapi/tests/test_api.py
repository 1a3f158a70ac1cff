import pytest

from api import dump_item, parse_item


def test_parse_and_dump():
    item = parse_item({"sku": "B-12", "name": "bolt", "quantity": 40})
    assert dump_item(item) == {"sku": "B-12", "name": "bolt", "quantity": 40}


def test_quantity_defaults_to_zero():
    assert parse_item({"sku": "N-3", "name": "nut"}).quantity == 0


def test_unknown_and_missing_fields_are_refused():
    with pytest.raises(ValueError, match="unknown fields: colour"):
        parse_item({"sku": "B-12", "name": "bolt", "colour": "red"})
    with pytest.raises(ValueError, match="missing fields: name"):
        parse_item({"sku": "B-12"})


def test_types_are_checked():
    with pytest.raises(ValueError, match="quantity must be of type integer"):
        parse_item({"sku": "B-12", "name": "bolt", "quantity": "many"})
