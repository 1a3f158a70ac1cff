"""The web console's server side: its session (``session.py``), its page and files
(``routes.py``, ``static/``) and the headers its answers carry (``headers.py``)."""
