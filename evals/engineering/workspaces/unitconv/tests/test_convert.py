from cli import main
from convert import c_to_f, f_to_c, km_to_miles


def test_c_to_f():
    assert c_to_f(100) == 212
    assert c_to_f(-40) == -40


def test_f_to_c():
    assert f_to_c(212) == 100
    assert abs(f_to_c(70) - 21.1111) < 0.001


def test_km_to_miles():
    assert abs(km_to_miles(1.609344) - 1) < 1e-9
    assert abs(km_to_miles(10) - 6.2137) < 0.001


def test_cli_prints_both_sides(capsys):
    assert main(["100", "c", "f"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("100") and "°C = 212" in out and out.rstrip().endswith("°F")
