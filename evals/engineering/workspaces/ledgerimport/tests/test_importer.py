from datetime import date
from decimal import Decimal

import pytest

from csvline import split_fields
from importer import ImportError_, balance, import_rows


def test_plain_fields():
    assert split_fields("2024-03-01, Bakery ,-4.20\n") == ["2024-03-01", "Bakery", "-4.20"]


def test_quoted_field_keeps_its_comma():
    assert split_fields('2024-03-01,"ACME, Inc.",-120.00') == ["2024-03-01", "ACME, Inc.", "-120.00"]


def test_doubled_quote_inside_quotes():
    assert split_fields('"Joe ""JJ"" Smith",5') == ['Joe "JJ" Smith', "5"]


def test_import_and_balance():
    text = 'date,payee,amount\n2024-03-01,"ACME, Inc.",-120.00\n2024-03-02,Salary,2500.00\n'
    rows = import_rows(text)
    assert rows[0].day == date(2024, 3, 1) and rows[0].payee == "ACME, Inc."
    assert balance(rows) == Decimal("2380.00")


def test_wrong_field_count_names_the_line():
    with pytest.raises(ImportError_, match="line 2"):
        import_rows("date,payee,amount\n2024-03-01,Bakery\n")
