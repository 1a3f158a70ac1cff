import json

import pytest

from settings import load_settings


def write(tmp_path, data):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(data))
    return path


def test_missing_file_gives_defaults(tmp_path):
    s = load_settings(tmp_path / "nothing.json")
    assert (s.database_url, s.page_size, s.theme) == ("sqlite:///notes.db", 20, "light")


def test_file_values_win(tmp_path):
    s = load_settings(write(tmp_path, {"page_size": 5, "theme": "dark"}))
    assert (s.page_size, s.theme) == (5, "dark")


def test_database_url_from_file(tmp_path):
    s = load_settings(write(tmp_path, {"database_url": "postgresql://db/notes"}))
    assert s.database_url == "postgresql://db/notes"


def test_unknown_theme_is_refused(tmp_path):
    with pytest.raises(ValueError, match="theme"):
        load_settings(write(tmp_path, {"theme": "neon"}))
