"""The JSON log lines of the long-running processes (`fabric serve`, `fabric worker`) on
stderr, without secrets."""

from __future__ import annotations

import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

from fabric.domain.secrets import Secrets


def configure_logging(secrets: Secrets) -> None:
    """structlog JSON lines on stderr; ``secrets`` (the API token and keys) never reach them."""

    def scrub(_: object, __: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
        scrubbed: Mapping[str, Any] = secrets.redact_obj(event)
        return scrubbed

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            scrub,
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
