import pytest

from cli import main
from convert import c_to_f, f_to_c, format_quantity, km_to_miles, miles_to_km


def test_c_to_f():
    assert c_to_f(100) == 212
    assert c_to_f(-40) == -40


def test_f_to_c():
    assert f_to_c(212) == 100
    assert abs(f_to_c(70) - 21.1111) < 0.001


def test_km_to_miles():
    assert abs(km_to_miles(1.609344) - 1) < 1e-9
    assert abs(km_to_miles(10) - 6.2137) < 0.001


def test_miles_to_km():
    assert abs(miles_to_km(1) - 1.609344) < 1e-9
    assert abs(miles_to_km(km_to_miles(42)) - 42) < 1e-9


def test_cli_prints_both_sides(capsys):
    assert main(["100", "c", "f"]) == 0
    assert capsys.readouterr().out == "100 °C = 212 °F\n"


def test_cli_converts_miles_to_km(capsys):
    assert main(["10", "mi", "km"]) == 0
    assert capsys.readouterr().out == "10 mi = 16.09 km\n"


def test_at_most_two_decimals_without_trailing_zeros():
    assert format_quantity(21.5, "c") == "21.5 °C"
    assert format_quantity(6.2137, "mi") == "6.21 mi"


def test_an_unknown_conversion_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["5", "km", "c"])
    assert exited.value.code == 2
    assert "cannot convert km to c" in capsys.readouterr().err
