from cli import main


def test_dry_run_uses_the_host_option(capsys):
    assert main(["backup failed", "--to", "ops@b.c", "--smtp-host", "mx9", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == "'backup failed' to ops@b.c via mx9:25"


def test_example_config(capsys):
    args = ["hi", "--to", "x@y.z", "--config", "config.example.json", "--dry-run"]
    assert main(args) == 0
    assert "via relay.example.org:587" in capsys.readouterr().out
