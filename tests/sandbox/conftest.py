"""The escape tests run under every confining backend this machine offers: any test here that
takes a ``backend`` argument is run once per backend (see ``host.confining_backends``: on CI,
bubblewrap is required)."""

from __future__ import annotations

import pytest

from .host import confining_backends

BACKENDS = confining_backends()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", BACKENDS)


def probe_id(item: object) -> str:
    name = getattr(item, "name", str(item))
    return "-".join(name.lower().replace("/", " ").replace("'", "").split())
