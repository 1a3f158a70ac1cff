from mailer import Mailer


def test_describe_names_the_relay():
    mailer = Mailer({"relay_host": "relay.local", "port": 587, "sender": "a@b.c"})
    message = mailer.compose("ops@b.c", "disk full", "disk full")
    assert mailer.describe(message) == "'disk full' to ops@b.c via relay.local:587"
