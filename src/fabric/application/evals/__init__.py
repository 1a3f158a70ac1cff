"""``fabric eval``: run packs over a suite of cases and measure whether the work got done.

Each attempt is an ordinary run (its own runlog) in a fresh copy of the case's workspace,
followed by checks that do not trust the model. Everything outside the application (the
runner, copying folders, confined commands, safe file reads, the attempts file) comes in
through the ports in ``ports.py``.
"""
