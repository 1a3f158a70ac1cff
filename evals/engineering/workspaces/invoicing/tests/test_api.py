from api import quote


def test_quote_gross_prices():
    answer = quote(
        {"country": "DE", "items": [{"sku": "lamp", "net": "40.00"}, {"sku": "book", "net": "25.00", "reduced": True}]}
    )
    assert answer == {"items": [{"sku": "lamp", "gross": "47.60"}, {"sku": "book", "gross": "26.75"}], "total": "74.35"}


def test_quote_rounds_like_the_invoice():
    assert quote({"country": "DE", "items": [{"sku": "x", "net": "0.50"}]})["total"] == "0.60"


def test_quote_unknown_country():
    assert "error" in quote({"country": "FR", "items": []})
