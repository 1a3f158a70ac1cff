"""What the task service refuses, each a ``FabricError`` with a code (the HTTP adapter maps
codes to statuses: not_found 404, conflict and not_resumable 409, unavailable 503)."""

from __future__ import annotations

from fabric.domain.errors import FabricError


class NotFound(FabricError):
    """No such task, or no such call of it."""

    CODE = "not_found"


class ServiceUnavailable(FabricError):
    """The service cannot take the request now (it is shutting down)."""

    CODE = "unavailable"


class Conflict(FabricError):
    """The request cannot be done in the task's present state."""

    CODE = "conflict"


class NotResumable(Conflict):
    """The task cannot be resumed in its present state."""

    CODE = "not_resumable"
