import json

import pytest

from config import load_config


def test_defaults():
    assert load_config()["smtp_host"] == "localhost"


def test_file_overrides(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"smtp_host": "mx.internal", "port": 2525}))
    config = load_config(path)
    assert (config["smtp_host"], config["port"]) == ("mx.internal", 2525)


def test_unknown_setting_is_refused(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"smtp_hots": "typo"}))
    with pytest.raises(ValueError, match="smtp_hots"):
        load_config(path)
