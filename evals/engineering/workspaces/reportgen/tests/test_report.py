from cells import format_cell
from report import build_report, main
from table import render_table


def test_cells():
    assert format_cell("18234.56") == "18,234.56"
    assert format_cell("412") == "412"
    assert format_cell("North") == "North"


def test_table_aligns_numbers_right():
    text = render_table(["name", "n"], [["a", "1000"], ["bb", "5"]])
    assert text.splitlines() == ["name  n    ", "----  -----", "a     1,000", "bb        5"]


def test_report_of_the_sample():
    lines = build_report("sales.csv").splitlines()
    assert lines[2] == "North      412  18,234.56       44.26"


def test_command_line(capsys):
    assert main(["sales.csv"]) == 0
    assert "15,001.04" in capsys.readouterr().out
