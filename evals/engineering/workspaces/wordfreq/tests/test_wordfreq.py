import pytest

from wordfreq import count_words, main, ranked


def test_counting_ignores_case_and_punctuation():
    assert count_words("The cat; the HAT.") == {"the": 2, "cat": 1, "hat": 1}


def test_apostrophes_stay_inside_words():
    assert count_words("don't stop") == {"don't": 1, "stop": 1}


def test_ranking_breaks_ties_alphabetically():
    assert ranked(count_words("b a b c a")) == [("a", 2), ("b", 2), ("c", 1)]


def test_main_prints_every_word(capsys):
    assert main(["sample.txt"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["the 7", "fox 4", "hen 3"]
    assert len(lines) == 10


def test_missing_file_is_a_usage_error():
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-file.txt"])
    assert exit_info.value.code == 2
